#include "common/types.h"

#include <sstream>

namespace phv {

size_t dtype_size(DataType dt) {
  switch (dt) {
    case DataType::UINT8:
    case DataType::INT8:
    case DataType::BOOL: return 1;
    case DataType::INT16:
    case DataType::FLOAT16:
    case DataType::BFLOAT16: return 2;
    case DataType::INT32:
    case DataType::FLOAT32: return 4;
    case DataType::INT64:
    case DataType::FLOAT64: return 8;
  }
  return 0;  // unknown value (a cast from a bad int): callers validate against 0
}

const char* dtype_name(DataType dt) {
  switch (dt) {
    case DataType::UINT8: return "uint8";
    case DataType::INT8: return "int8";
    case DataType::INT16: return "int16";
    case DataType::INT32: return "int32";
    case DataType::INT64: return "int64";
    case DataType::FLOAT16: return "float16";
    case DataType::BFLOAT16: return "bfloat16";
    case DataType::FLOAT32: return "float32";
    case DataType::FLOAT64: return "float64";
    case DataType::BOOL: return "bool";
  }
  return "unknown";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "Sum";
    case ReduceOp::AVERAGE: return "Average";
    case ReduceOp::MIN: return "Min";
    case ReduceOp::MAX: return "Max";
    case ReduceOp::PRODUCT: return "Product";
    case ReduceOp::ADASUM: return "Adasum";
  }
  return "unknown";
}

const char* op_type_name(OpType op) {
  switch (op) {
    case OpType::ALLREDUCE: return "allreduce";
    case OpType::ALLGATHER: return "allgather";
    case OpType::BROADCAST: return "broadcast";
    case OpType::ALLTOALL: return "alltoall";
    case OpType::REDUCESCATTER: return "reducescatter";
    case OpType::BARRIER: return "barrier";
    case OpType::JOIN: return "join";
  }
  return "unknown";
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

}  // namespace phv
