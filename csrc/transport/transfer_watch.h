// Stall limits for the transfers of the calling thread. A collective whose peer stops answering (the
// process is stopped, swapped out, or stuck) makes no byte move; without a watch the transport only
// notices at the op's deadline. The engine installs a TransferWatch around each unit it runs and each
// negotiation exchange (HOROVOD_STALL_CHECK_TIME_SECONDS / _SHUTDOWN_TIME_SECONDS); while the transport
// sleeps for a peer it warns once no byte has moved for warn_s (again every warn_s), naming the op
// (describe) and the peers it waits for, and fails with TIMEOUT once nothing moved for fail_s. 0: off.
#pragma once
#include <string>

namespace phv {

struct TransferWatch {
  double warn_s = 0;
  double fail_s = 0;
  // What the transfers are part of ("allreduce 'w' (op #3 in process set 0)"), built only when needed.
  std::string (*describe)(const void* context) = nullptr;
  const void* context = nullptr;
};

// Installs `watch` (which must outlive the scope) on this thread; restores the outer one at the end.
class TransferWatchScope {
 public:
  explicit TransferWatchScope(const TransferWatch* watch);
  ~TransferWatchScope();
  TransferWatchScope(const TransferWatchScope&) = delete;
  TransferWatchScope& operator=(const TransferWatchScope&) = delete;

 private:
  const TransferWatch* outer_;
};

// This thread's watch, or nullptr.
const TransferWatch* current_transfer_watch();

}  // namespace phv
