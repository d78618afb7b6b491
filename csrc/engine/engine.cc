// phv::Engine: an EngineCore on top of a TcpBackend (connections, store) built from the options.
#include "engine/engine.h"

#include "common/error.h"
#include "engine/engine_core.h"
#include "engine/failure_board.h"
#include "engine/hierarchy_setup.h"
#include "rendezvous/tcp_store.h"
#include "transport/explaining_transport.h"

namespace phv {

struct Engine::Impl {
  // Raw pointers: when shutdown() could not stop the background thread (an unresponsive peer), the
  // thread still uses both, so they are deliberately leaked instead of destroyed under it.
  TcpBackend* backend = nullptr;
  ExplainingTransport* explaining = nullptr;  // between the core and the backend's transport (size > 1)
  EngineCore* core = nullptr;
  bool leaked = false;

  ~Impl() {
    if (leaked) return;
    delete core;
    delete explaining;
    delete backend;
  }
};

Engine::Engine(const EngineOptions& options) : impl_(new Impl) {
  set_log_level(options.log_level);
  set_log_rank(options.connect.rank);
  impl_->backend = new TcpBackend(options.connect);
  Transport* transport = &impl_->backend->transport();
  const ConnectOptions& c = options.connect;
  if (c.size > 1 && c.store_port > 0) {
    // A transport failure blames the peer whose connection broke; the failure board (through a fresh,
    // short-lived store client: the store may be gone) adds which rank failed first, and why.
    FailureBoardOptions board{c.store_prefix, c.rank, c.size, 1.0};
    std::string host = c.store_host, secret = c.secret;
    int port = c.store_port;
    impl_->explaining = new ExplainingTransport(*transport, [board, host, port, secret](const HvdError& error) {
      TcpStoreClient store(host, port, secret, board.wait_s);
      return explain_failure(store, board, error);
    });
    transport = impl_->explaining;
  }
  try {
    EngineOptions with_layout = options;
    HierarchySetup hs{options.host_name, options.hierarchical_allreduce, options.hierarchical_allgather,
                      options.connect.connect_timeout_s};
    // Before the core starts: nothing else uses the connections yet.
    if (c.size > 1) with_layout.hierarchy = setup_hierarchy(impl_->backend->world(), hs, impl_->backend->tuning());
    impl_->core = new EngineCore(*transport, impl_->backend->tuning(), with_layout);
    // The GPU backend shares our store (NCCL unique ids under <prefix>/gpu), made on the first CUDA request.
    TcpBackend* tcp = impl_->backend;
    std::string gpu_prefix = c.store_prefix + "/gpu";
    GpuBackendOptions gpu;
    gpu.global_rank = c.rank;
    gpu.timeout_s = options.timeout_s;
    gpu.tuning = tcp->tuning();
    gpu.path = parse_gpu_path_request(options.gpu_path);
    impl_->core->set_gpu_factory([tcp, gpu_prefix, gpu](int device) {
      GpuBackendOptions mine = gpu;
      mine.device = device;
      return make_gpu_backend(tcp->store(), gpu_prefix, mine);
    });
  } catch (...) {
    delete impl_->explaining;
    impl_->explaining = nullptr;
    delete impl_->backend;
    impl_->backend = nullptr;
    throw;
  }
}

Engine::~Engine() { shutdown(); }

Handle Engine::enqueue(Request request, double timeout_s) {
  return impl_->core->enqueue(std::move(request), timeout_s);
}
bool Engine::poll(Handle handle) { return impl_->core->poll(handle); }
int64_t Engine::auto_name_floor(const std::string& prefix) const { return impl_->core->auto_name_floor(prefix); }
Result Engine::wait(Handle handle) { return impl_->core->wait(handle); }
Result Engine::run_sync(Request request, double timeout_s) {
  return impl_->core->run_sync(std::move(request), timeout_s);
}
std::shared_ptr<PreparedRequest> Engine::prepare(Request request, double timeout_s) {
  return impl_->core->prepare(std::move(request), timeout_s);
}
Result Engine::run_prepared(PreparedRequest& prepared, const void* input, void* output) {
  return impl_->core->run_prepared(prepared, input, output);
}
int Engine::add_process_set(const std::vector<int>& ranks) { return impl_->core->add_process_set(ranks); }
void Engine::remove_process_set(int id) { impl_->core->remove_process_set(id); }
std::vector<int> Engine::process_set_ranks(int id) const { return impl_->core->process_set_ranks(id); }
std::vector<int> Engine::process_set_ids() const { return impl_->core->process_set_ids(); }
void Engine::start_timeline(const std::string& path, bool mark_cycles) {
  impl_->core->start_timeline(path, mark_cycles);
}
void Engine::stop_timeline() { impl_->core->stop_timeline(); }
void Engine::set_knobs(const EngineKnobs& knobs) { impl_->core->set_knobs(knobs); }
const Hierarchy& Engine::hierarchy() const { return impl_->core->hierarchy(); }
int Engine::rank() const { return impl_->core->rank(); }
int Engine::size() const { return impl_->core->size(); }
bool Engine::interrupted() const { return impl_->core != nullptr && impl_->core->interrupted(); }

void Engine::shutdown() {
  if (impl_->leaked || impl_->core == nullptr) return;
  if (!impl_->core->shutdown()) impl_->leaked = true;
}

}  // namespace phv
