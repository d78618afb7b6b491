#include "engine/descriptor.h"

#include <sstream>

#include "common/enforce.h"

namespace phv {

int64_t Desc::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Desc::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

size_t Desc::bytes() const { return static_cast<size_t>(count()) * dtype_size(dtype); }

const char* kind_name(DescKind kind) {
  if (kind == kDescAddProcessSet) return "add_process_set";
  if (kind == kDescRemoveProcessSet) return "remove_process_set";
  if (kind <= kDescJoin) return op_type_name(static_cast<OpType>(kind));
  return "unknown op";
}

std::string device_str(int device) { return device < 0 ? "cpu" : "cuda:" + std::to_string(device); }

namespace {

// A process-set change travels in the place of a shape, as a list of integers: the new set's ranks, or the
// removed set's id.
std::vector<int64_t> set_change_args(const Desc& d) {
  if (d.kind == kDescAddProcessSet) return std::vector<int64_t>(d.set_ranks.begin(), d.set_ranks.end());
  return {d.removed_set};
}

void set_set_change_args(Desc& d, const std::vector<int64_t>& args) {
  d.set_ranks.clear();
  d.removed_set = 0;
  if (d.kind == kDescAddProcessSet) {
    d.set_ranks.assign(args.begin(), args.end());
  } else {
    PHV_ENFORCE(args.size() == 1, "corrupt engine negotiation message: remove_process_set with ", args.size(),
                " arguments");
    d.removed_set = static_cast<int>(args[0]);
  }
}

}  // namespace

void encode_desc(WireWriter& w, const Desc& d) {
  w.put<uint8_t>(d.kind);
  w.put<uint8_t>(static_cast<uint8_t>(d.dtype));
  w.put<uint8_t>(static_cast<uint8_t>(d.op));
  w.put<int32_t>(d.set);
  w.put<int32_t>(d.root);
  w.put<int32_t>(d.device);
  w.put<double>(d.prescale);
  w.put<double>(d.postscale);
  if (is_set_change(d.kind)) {
    w.put_i64s(set_change_args(d));
  } else {
    w.put_i64s(d.shape);
  }
  w.put_string(d.name);
  w.put_string(d.group_key);
  w.put<int32_t>(d.group_size);
  w.put<uint8_t>(d.uneven_splits ? 1 : 0);
}

void decode_desc(WireReader& r, Desc& d) {
  d.kind = static_cast<DescKind>(r.get<uint8_t>());
  uint8_t dt = r.get<uint8_t>();
  uint8_t op = r.get<uint8_t>();
  PHV_ENFORCE(dt <= static_cast<uint8_t>(DataType::BOOL) && op <= static_cast<uint8_t>(ReduceOp::ADASUM),
              "corrupt engine negotiation message: dtype ", int(dt), ", op ", int(op));
  d.dtype = static_cast<DataType>(dt);
  d.op = static_cast<ReduceOp>(op);
  d.set = r.get<int32_t>();
  d.root = r.get<int32_t>();
  d.device = r.get<int32_t>();
  d.prescale = r.get<double>();
  d.postscale = r.get<double>();
  r.get_i64s(d.shape);
  r.get_string(d.name);
  r.get_string(d.group_key);
  d.group_size = r.get<int32_t>();
  d.uneven_splits = r.get<uint8_t>() != 0;
  if (is_set_change(d.kind)) {
    set_set_change_args(d, d.shape);
    d.shape.clear();
  }
}

bool dim0_may_differ(DescKind kind) { return kind == kDescAllgather || kind == kDescAlltoall; }

namespace {

bool uses_reduce_op(DescKind kind) { return kind == kDescAllreduce || kind == kDescReducescatter; }

bool shapes_agree(const Desc& a, const Desc& b) {
  if (!dim0_may_differ(a.kind)) return a.shape == b.shape;
  if (a.shape.size() != b.shape.size()) return false;
  for (size_t i = 1; i < a.shape.size(); ++i) {
    if (a.shape[i] != b.shape[i]) return false;
  }
  return true;
}

template <typename T>
std::string pair_msg(const char* what, int ra, const T& va, int rb, const T& vb, const char* verb = "sent") {
  std::ostringstream out;
  out << "Mismatched " << what << ": rank " << ra << " " << verb << " " << va << ", rank " << rb << " " << verb << " "
      << vb;
  return out.str();
}

}  // namespace

std::string compare_descs(const Desc& a, int ra, const Desc& b, int rb) {
  if (a.kind != b.kind) {
    return pair_msg("collective operations", ra, std::string(kind_name(a.kind)), rb, std::string(kind_name(b.kind)),
                    "requested");
  }
  const char* op = kind_name(a.kind);
  if (is_set_change(a.kind)) {
    std::vector<int64_t> args_a = set_change_args(a), args_b = set_change_args(b);
    if (args_a != args_b) {
      return pair_msg((std::string(op) + " arguments").c_str(), ra, shape_str(args_a), rb, shape_str(args_b));
    }
    return "";
  }
  if (a.dtype != b.dtype) {
    return pair_msg("data types", ra, std::string(dtype_name(a.dtype)), rb, std::string(dtype_name(b.dtype)));
  }
  if (uses_reduce_op(a.kind)) {
    if (a.op != b.op) {
      return pair_msg("reduce ops", ra, std::string(reduce_op_name(a.op)), rb, std::string(reduce_op_name(b.op)),
                      "used");
    }
    if (a.prescale != b.prescale) return pair_msg("prescale factors", ra, a.prescale, rb, b.prescale, "used");
    if (a.postscale != b.postscale) return pair_msg("postscale factors", ra, a.postscale, rb, b.postscale, "used");
  }
  if (a.kind == kDescBroadcast && a.root != b.root) {
    return pair_msg("broadcast root ranks", ra, a.root, rb, b.root, "used root");
  }
  if (!shapes_agree(a, b)) {
    std::string what = std::string(op) + " tensor shapes";
    std::string msg = pair_msg(what.c_str(), ra, shape_str(a.shape), rb, shape_str(b.shape));
    if (dim0_may_differ(a.kind)) msg += " (all dimensions but the first must agree)";
    return msg;
  }
  if (a.device != b.device) return pair_msg("devices", ra, device_str(a.device), rb, device_str(b.device), "used");
  if (a.group_key != b.group_key || a.group_size != b.group_size) {
    auto group = [](const Desc& d) {
      return d.group_size == 0 ? std::string("no group")
                               : "a group of " + std::to_string(d.group_size) + " led by '" + d.group_key + "'";
    };
    return pair_msg("grouping", ra, group(a), rb, group(b), "used");
  }
  return "";
}

bool same_request(const Desc& agreed, const Desc& mine) {
  if (agreed.kind != mine.kind || agreed.dtype != mine.dtype || agreed.device != mine.device ||
      agreed.group_size != mine.group_size || agreed.set != mine.set) {
    return false;
  }
  if (uses_reduce_op(agreed.kind) &&
      (agreed.op != mine.op || agreed.prescale != mine.prescale || agreed.postscale != mine.postscale)) {
    return false;
  }
  if (agreed.kind == kDescBroadcast && agreed.root != mine.root) return false;
  // Agreed even splits would make the executor skip the exchange this rank's uneven ones need. The other
  // way round is safe: the exchange then runs for splits that happen to be even.
  if (mine.uneven_splits && !agreed.uneven_splits) return false;
  return shapes_agree(agreed, mine);
}

}  // namespace phv
