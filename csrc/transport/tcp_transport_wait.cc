// The waiting side of TcpTransport::progress(): before each poll() it asks the interrupt check of the
// calling thread (interrupt.h), applies the thread's stall watch (transfer_watch.h) and caps the sleep so
// that it wakes for the next of these; and the text naming what a stuck progress() waits for.
#include <algorithm>
#include <sstream>

#include "common/interrupt.h"
#include "common/logging.h"
#include "transport/tcp_transport.h"

namespace phv {

namespace {

int ms_until(Clock::time_point t, Clock::time_point now) {
  if (t <= now) return 0;
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count() + 1);
}

std::string one_decimal(double s) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << s;
  return out.str();
}

}  // namespace

void TcpTransport::begin_idle(Idle& idle) const {
  idle.watch = current_transfer_watch();
  idle.moves_seen = moves_;  // the stall clock starts at the first sleep (before_sleep): no clock read here
}

int TcpTransport::before_sleep(Idle& idle, Deadline deadline) {
  if (interrupt_requested()) {
    // Names no other rank on purpose: the failure board (failure_board.h) would wait for its report.
    fail(ErrorKind::INTERRUPTED, "interrupted while waiting for the network (a signal handler raised, or "
                                 "another thread of this rank was interrupted)");
  }
  int timeout = poll_timeout_ms(deadline);
  if (idle.watch != nullptr) {
    const TransferWatch& w = *idle.watch;
    Clock::time_point now = Clock::now();
    if (moves_ != idle.moves_seen || idle.since == Clock::time_point{}) {  // (re)start the stall clock
      idle.moves_seen = moves_;
      idle.since = now;
      idle.next_warn = now + seconds_to_duration(w.warn_s);
    }
    double stalled = std::chrono::duration<double>(now - idle.since).count();
    if (w.fail_s > 0) {
      if (stalled >= w.fail_s)
        fail(ErrorKind::TIMEOUT,
             "no byte moved for " + one_decimal(stalled) + " s (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=" +
                 one_decimal(w.fail_s) + ") while waiting for " + waiting_for(),
             first_waiting_peer());
      timeout = std::min(timeout, ms_until(idle.since + seconds_to_duration(w.fail_s), now));
    }
    if (w.warn_s > 0) {
      if (now >= idle.next_warn) {
        log(LogLevel::WARNING, "rank ", rank_, ": ", w.describe ? w.describe(w.context) : std::string("a transfer"),
            " has not moved a byte for ", one_decimal(stalled),
            " s (HOROVOD_STALL_CHECK_TIME_SECONDS=", one_decimal(w.warn_s), "): waiting for ", waiting_for(),
            ". That rank may be stopped, swapped out or overloaded.");
        idle.next_warn = now + seconds_to_duration(w.warn_s);
      }
      timeout = std::min(timeout, ms_until(idle.next_warn, now));
    }
  }
  return interrupt_poll_ms(timeout);
}

std::string TcpTransport::waiting_for() const {
  std::string what;
  int shown = 0;
  for (const auto& link : links_) link->describe_waits(what, shown, 4);
  return what;
}

int TcpTransport::first_waiting_peer() const {
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_ && links_[peer]->waiting()) return peer;
  return kNoPeer;
}

}  // namespace phv
