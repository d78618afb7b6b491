#include "transport/transfer_watch.h"

namespace phv {

namespace {
thread_local const TransferWatch* t_watch = nullptr;
}  // namespace

TransferWatchScope::TransferWatchScope(const TransferWatch* watch) : outer_(t_watch) { t_watch = watch; }
TransferWatchScope::~TransferWatchScope() { t_watch = outer_; }

const TransferWatch* current_transfer_watch() { return t_watch; }

}  // namespace phv
