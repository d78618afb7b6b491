#include "engine/validate.h"

#include <cmath>

#include "common/adasum.h"
#include "common/error.h"

namespace phv {

Desc validate_request(const Request& req, int set_size) {
  int type = static_cast<int>(req.type);
  PHV_CHECK_ARG(type >= 0 && type <= static_cast<int>(OpType::BARRIER), "unknown op type ", type);
  // Error texts name the request as "allreduce 'grad.3'" (built only when a check fails).
#define WHAT op_type_name(req.type), " '", req.name, "'"
  int dt = static_cast<int>(req.dtype);
  PHV_CHECK_ARG(dt >= 0 && dt <= static_cast<int>(DataType::BOOL), WHAT, ": unknown dtype code ", dt);
  int rop = static_cast<int>(req.reduce_op);
  PHV_CHECK_ARG(rop >= 0 && rop <= static_cast<int>(ReduceOp::ADASUM), WHAT, ": unknown reduce op code ", rop);
  PHV_CHECK_ARG(std::isfinite(req.prescale) && std::isfinite(req.postscale), WHAT,
                ": prescale and postscale must be finite");

  Desc d;
  d.kind = desc_kind(req.type);
  d.set = req.process_set;
  d.device = req.device;
  d.name = req.name;
  if (req.type == OpType::BARRIER) return d;  // nothing but the name and the set to agree on

  d.dtype = req.dtype;
  d.shape = req.shape;
  int64_t count = 1;
  for (int64_t dim : req.shape) {
    PHV_CHECK_ARG(dim >= 0, WHAT, ": negative dimension in shape ", shape_str(req.shape));
    count *= dim;
  }
  PHV_CHECK_ARG(count == 0 || req.input != nullptr, WHAT, ": input pointer is null");

  bool reduces = req.type == OpType::ALLREDUCE || req.type == OpType::REDUCESCATTER;
  if (reduces) {
    d.op = req.reduce_op;
    d.prescale = req.prescale;
    d.postscale = req.postscale;
    if (req.dtype == DataType::BOOL) {
      PHV_CHECK_ARG(req.reduce_op != ReduceOp::AVERAGE && req.prescale == 1.0 && req.postscale == 1.0, WHAT,
                    ": bool tensors support sum, min, max and product without scale factors");
    }
    if (req.reduce_op == ReduceOp::ADASUM) {
      PHV_CHECK_ARG(req.type == OpType::ALLREDUCE, WHAT, ": op Adasum is an allreduce (and grouped allreduce) op");
      PHV_CHECK_ARG(adasum_dtype(req.dtype), WHAT,
                    ": op Adasum needs a float16, bfloat16, float32 or float64 "
                    "tensor, not ",
                    dtype_name(req.dtype));
      PHV_CHECK_ARG(req.device < 0, WHAT,
                    ": op Adasum runs on host tensors only (the NCCL path has no Adasum); "
                    "move the tensor to the CPU");
    }
  }
  if (req.norm_tap.measures()) {
    PHV_CHECK_ARG(req.type == OpType::ALLREDUCE && req.device < 0 &&
                      (req.dtype == DataType::FLOAT32 || req.dtype == DataType::FLOAT64),
                  WHAT, ": squared-norm taps (sumsq_in/sumsq_out) need a host float32 or float64 allreduce");
  }
  if (req.norm_tap.fill_from != nullptr) {
    PHV_CHECK_ARG(req.type == OpType::ALLREDUCE && req.device < 0 && req.input == req.output &&
                      (req.dtype == DataType::FLOAT32 || req.dtype == DataType::FLOAT64),
                  WHAT, ": fill_from needs an in-place host float32 or float64 allreduce");
  }
  switch (req.type) {
    case OpType::ALLREDUCE: PHV_CHECK_ARG(count == 0 || req.output != nullptr, WHAT, ": output pointer is null"); break;
    case OpType::BROADCAST:
      PHV_CHECK_ARG(req.root >= 0 && req.root < set_size, WHAT, ": root rank ", req.root, " is out of range [0, ",
                    set_size, ")");
      PHV_CHECK_ARG(count == 0 || req.output != nullptr, WHAT, ": output pointer is null");
      d.root = req.root;
      break;
    case OpType::ALLGATHER:
      PHV_CHECK_ARG(!req.shape.empty(), WHAT, ": needs a tensor with at least one dimension");
      break;
    case OpType::REDUCESCATTER:
      PHV_CHECK_ARG(!req.shape.empty(), WHAT, ": needs a tensor with at least one dimension");
      PHV_CHECK_ARG(count == 0 || req.output != nullptr, WHAT, ": output pointer is null");
      break;
    case OpType::ALLTOALL: {
      PHV_CHECK_ARG(!req.shape.empty(), WHAT, ": needs a tensor with at least one dimension");
      if (req.splits.empty()) {
        PHV_CHECK_ARG(req.shape[0] % set_size == 0, WHAT, ": the first dimension (", req.shape[0],
                      ") is not divisible by the number of ranks (", set_size, "); pass splits");
      } else {
        PHV_CHECK_ARG(static_cast<int>(req.splits.size()) == set_size, WHAT, ": ", req.splits.size(),
                      " splits given for ", set_size, " ranks");
        int64_t sum = 0;
        for (int64_t s : req.splits) {
          PHV_CHECK_ARG(s >= 0, WHAT, ": negative split ", s);
          sum += s;
        }
        PHV_CHECK_ARG(sum == req.shape[0], WHAT, ": splits add up to ", sum, " but the first dimension is ",
                      req.shape[0]);
        for (int64_t s : req.splits) d.uneven_splits = d.uneven_splits || s * set_size != req.shape[0];
      }
      break;
    }
    default: break;
  }
  PHV_CHECK_ARG(req.group == 0 || req.group_size >= 1, WHAT, ": group ", req.group, " has group_size ", req.group_size);
  if (req.group != 0) d.group_size = static_cast<int32_t>(req.group_size);
  return d;
}

#undef WHAT

}  // namespace phv
