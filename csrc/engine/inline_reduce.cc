#include "engine/inline_reduce.h"

#include <cstring>
#include <memory>

#include "common/reduce.h"

namespace phv {

bool inline_eligible(const Desc& d) {
  // Adasum is not element-wise: reduce_inline's kernel cannot do it. A broadcast only in the global set:
  // there every rank is a member, which the express round (express_round.h) needs for a hit, so a small
  // broadcast in a smaller set never turns express mode on only to miss it.
  const bool kind_ok = (d.kind == kDescAllreduce && d.op != ReduceOp::ADASUM && d.group_size == 0) ||
                       ((d.kind == kDescBroadcast || d.kind == kDescReducescatter) && d.set == 0);
  return kind_ok && d.device < 0 && d.bytes() > 0 && d.bytes() <= kInlineBytes;
}

bool inline_eligible(const CacheEntry& e) {
  const Desc& d = e.desc;
  if (!concatenates_inputs(d.kind)) return inline_eligible(d);
  if (d.set != 0 || d.device >= 0 || e.dim0s.empty() || e.dim0s.size() > kInlineMaxGatherRanks) return false;
  const auto n = static_cast<int64_t>(e.dim0s.size());
  int64_t rows = 0;
  for (int64_t r : e.dim0s) {
    if (d.kind == kDescAlltoall && r % n != 0) return false;
    rows += r;
  }
  const size_t bytes = static_cast<size_t>(rows * d.row_elements()) * dtype_size(d.dtype);
  return bytes > 0 && bytes <= kInlineBytes;
}

bool sends_inline(const Request& req) {
  if (req.type != OpType::ALLTOALL || req.splits.empty()) return true;
  const auto n = static_cast<int64_t>(req.splits.size());
  for (int64_t s : req.splits) {
    if (req.shape.empty() || s * n != req.shape[0]) return false;
  }
  return true;
}

void append_inline(RankMessage& m, int pos, const Op& op) {
  InlineData& rec = m.add_inline();
  rec.pos = pos;
  size_t bytes = op.desc.bytes();
  rec.data.resize(bytes);
  std::memcpy(rec.data.data(), op.req.input, bytes);
  if (op.desc.kind != kDescBroadcast && op.desc.prescale != 1.0)
    scale_buffer(rec.data.data(), static_cast<size_t>(op.desc.count()), op.desc.dtype, op.desc.prescale);
}

namespace {
const InlineData* find_inline(const RankMessage& m, int pos) {
  for (size_t i = 0; i < m.n_inlines; ++i) {
    if (m.inlines[i].pos == pos) return &m.inlines[i];
  }
  return nullptr;
}

// `item.data` holds every member's whole input in set order; member r's input is split into n equal
// blocks of dim0s[r] / n rows, and block op.set_index of each is this rank's.
void finish_inline_alltoall(const ResponseItem& item, Op& op) {
  const Desc& d = *item.agreed;
  const std::vector<int64_t>& dim0s = *item.agreed_dim0s;
  const auto n = static_cast<int64_t>(dim0s.size());
  const size_t row_bytes = static_cast<size_t>(d.row_elements()) * dtype_size(d.dtype);
  OutputVector out;
  op.result.received_splits.assign(dim0s.size(), 0);
  size_t member_at = 0;  // where member r's input starts
  for (size_t r = 0; r < dim0s.size(); ++r) {
    const int64_t rows = dim0s[r] / n;
    const uint8_t* block = item.data.data() + member_at + static_cast<size_t>(rows * op.set_index) * row_bytes;
    out.insert(out.end(), block, block + static_cast<size_t>(rows) * row_bytes);
    op.result.received_splits[r] = rows;
    member_at += static_cast<size_t>(dim0s[r]) * row_bytes;
  }
  op.result.output_shape = d.shape;
  op.result.output_shape[0] = static_cast<int64_t>(out.size() / row_bytes);
  op.result.output = std::make_shared<OutputBuffer>(std::move(out));
}
}  // namespace

bool reduce_inline(const std::vector<RankMessage>& msgs, int pos, const Desc& d, const std::vector<int>& members,
                   const std::vector<uint8_t>& joined, std::vector<uint8_t>& out) {
  if (concatenates_inputs(d.kind)) {  // every member's bytes, in set order (each checked by its cache hit)
    out.clear();
    for (int m : members) {
      const InlineData* rec = find_inline(msgs[static_cast<size_t>(m)], pos);
      if (rec == nullptr) return false;
      out.insert(out.end(), rec->data.begin(), rec->data.end());
    }
    return true;
  }
  size_t bytes = d.bytes();
  if (d.kind == kDescBroadcast) {
    for (int m : members) {
      const InlineData* rec = find_inline(msgs[static_cast<size_t>(m)], pos);
      if (rec == nullptr || rec->data.size() != bytes) return false;
    }
    const InlineData* root = find_inline(msgs[static_cast<size_t>(members[static_cast<size_t>(d.root)])], pos);
    out.assign(root->data.begin(), root->data.end());
    return true;
  }
  ReduceOp op = d.op == ReduceOp::AVERAGE ? ReduceOp::SUM : d.op;
  bool first = true;
  for (int m : members) {
    const InlineData* rec = find_inline(msgs[static_cast<size_t>(m)], pos);
    if (rec == nullptr || rec->data.size() != bytes) {
      if (joined[static_cast<size_t>(m)] && rec == nullptr) continue;  // joined: contributes the identity
      return false;
    }
    if (first) {
      out.assign(rec->data.begin(), rec->data.end());
      first = false;
    } else {
      reduce_into(out.data(), rec->data.data(), static_cast<size_t>(d.count()), d.dtype, op);
    }
  }
  return !first;
}

void finish_inline(const ResponseItem& item, Op& op, int set_size) {
  const Desc& d = *item.agreed;
  if (d.kind == kDescAllgather) {  // the engine owns the output (Result.output), as the collective's
    op.result.output = std::make_shared<OutputBuffer>(OutputVector(item.data.begin(), item.data.end()));
    op.result.output_shape = d.shape;
    op.result.output_shape[0] =
        static_cast<int64_t>(item.data.size() / (static_cast<size_t>(d.row_elements()) * dtype_size(d.dtype)));
    return;
  }
  if (d.kind == kDescAlltoall) {
    finish_inline_alltoall(item, op);
    return;
  }
  const uint8_t* from = item.data.data();
  size_t bytes = item.data.size();
  op.result.output_shape = d.shape;
  if (d.kind == kDescReducescatter) {  // this rank's block of the whole reduction
    const size_t row_bytes = static_cast<size_t>(d.row_elements()) * dtype_size(d.dtype);
    int64_t first = 0;
    for (int r = 0; r < op.set_index; ++r) first += reducescatter_rows(d.shape[0], set_size, r);
    const int64_t rows = reducescatter_rows(d.shape[0], set_size, op.set_index);
    from += static_cast<size_t>(first) * row_bytes;
    bytes = static_cast<size_t>(rows) * row_bytes;
    op.result.output_shape[0] = rows;
  }
  std::memcpy(op.req.output, from, bytes);
  if (d.kind == kDescBroadcast) return;
  double post = d.op == ReduceOp::AVERAGE ? d.postscale / set_size : d.postscale;
  if (post != 1.0) scale_buffer(op.req.output, bytes / dtype_size(d.dtype), d.dtype, post);
}

const char* inline_span(const Desc& d) {
  switch (d.kind) {
    case kDescBroadcast: return "BROADCAST";
    case kDescReducescatter: return "REDUCESCATTER";
    case kDescAllgather: return "ALLGATHER";
    case kDescAlltoall: return "ALLTOALL";
    default: return "ALLREDUCE";
  }
}

}  // namespace phv
