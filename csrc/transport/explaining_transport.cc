#include "transport/explaining_transport.h"

#include "common/interrupt.h"

namespace phv {

void ExplainingTransport::rethrow(const HvdError& e) {
  if (e.kind() == ErrorKind::SHUTDOWN || e.kind() == ErrorKind::INVALID_ARGUMENT) throw e;
  std::lock_guard<std::mutex> lock(mu_);
  if (original_.empty()) {
    original_ = e.what();
    std::string extra;
    try {
      InterruptMask mask;  // an interrupted rank still publishes why it stopped
      extra = explain_ ? explain_(e) : std::string();
    } catch (const std::exception&) {
      extra.clear();
    }
    explained_ = original_ + extra;
  }
  if (original_ == e.what()) throw HvdError(e.kind(), explained_, e.peer());
  throw e;
}

RequestId ExplainingTransport::post_send(int peer, const void* buf, size_t len) {
  try {
    return inner_.post_send(peer, buf, len);
  } catch (const HvdError& e) {
    rethrow(e);
  }
}

RequestId ExplainingTransport::post_recv(int peer, void* buf, size_t len) {
  try {
    return inner_.post_recv(peer, buf, len);
  } catch (const HvdError& e) {
    rethrow(e);
  }
}

RequestId ExplainingTransport::post_recv_sink(int peer, size_t len, size_t grain, RecvSink* sink) {
  try {
    return inner_.post_recv_sink(peer, len, grain, sink);
  } catch (const HvdError& e) {
    rethrow(e);
  }
}

void ExplainingTransport::read_direct(int peer, uint64_t addr, void* dst, size_t len, const char* op) {
  try {
    inner_.read_direct(peer, addr, dst, len, op);
  } catch (const HvdError& e) {
    rethrow(e);
  }
}

void ExplainingTransport::write_direct(int peer, uint64_t addr, const void* src, size_t len, const char* op) {
  try {
    inner_.write_direct(peer, addr, src, len, op);
  } catch (const HvdError& e) {
    rethrow(e);
  }
}

void ExplainingTransport::start_posted() {
  try {
    inner_.start_posted();
  } catch (const HvdError& e) {
    rethrow(e);
  }
}

void ExplainingTransport::progress(std::vector<RequestId>& completed, Deadline deadline) {
  try {
    inner_.progress(completed, deadline);
  } catch (const HvdError& e) {
    rethrow(e);
  }
}

}  // namespace phv
