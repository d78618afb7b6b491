#include "engine/control_round.h"

#include "engine/fusion.h"

namespace phv {

ControlRound::ControlRound(Transport& transport, ProcessSetRegistry& sets, ResponseCache& cache, Timeline& timeline,
                           const EngineOptions& options, bool gpu_built)
    : transport_(transport),
      cache_(cache),
      rank_(transport.rank()),
      size_(transport.size()),
      express_(transport, cache) {
  if (rank_ == 0) {
    coordinator_ = std::make_unique<Coordinator>(size_, sets, cache, timeline, options, gpu_built);
    msgs_.resize(static_cast<size_t>(size_));
    slots_.assign(static_cast<size_t>(size_), std::vector<uint8_t>(kSlotBytes));
  }
  resp_buf_.resize(kSlotBytes);
}

void ControlRound::set_fusion_threshold(int64_t bytes) {
  if (coordinator_) coordinator_->set_fusion_threshold(bytes);
}

const ResponseList& ControlRound::run(const RankMessage& msg, Deadline deadline) {
  last_express_ = Express::OFF;
  if (express_on_) {
    if (express_.run(msg, deadline)) {
      last_express_ = Express::HIT;
      return express_.response();  // the mode stays on: every rank saw the same hit
    }
    last_express_ = Express::MISS;  // every rank saw the miss: all run the star round below
  }
  begin(msg);
  while (!step(Step::BLOCK, deadline)) {
  }
  return resp_;
}

void ControlRound::begin(const RankMessage& msg) {
  encode_rank_message(msg, send_buf_);
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) transport_.post_recv(r, slots_[static_cast<size_t>(r)].data(), kSlotBytes);
    stage_ = Stage::GATHER_HEADS;
    return;
  }
  transport_.post_send(0, send_buf_.data(), kSlotBytes);
  if (send_buf_.size() > kSlotBytes) {
    transport_.post_send(0, send_buf_.data() + kSlotBytes, send_buf_.size() - kSlotBytes);
  }
  if (resp_buf_.size() < kSlotBytes) resp_buf_.resize(kSlotBytes);
  transport_.post_recv(0, resp_buf_.data(), kSlotBytes);
  stage_ = Stage::REPLY_HEAD;
}

bool ControlRound::step(Step how, Deadline deadline) {
  if (stage_ == Stage::DONE || stage_ == Stage::IDLE) return stage_ == Stage::DONE;
  if (transport_.pending() > 0) {
    if (how == Step::POLL) return false;
    drive(deadline);
  }
  switch (stage_) {
    case Stage::GATHER_HEADS: gather_tails(); return false;
    case Stage::GATHER_TAILS: decide_and_broadcast(); return false;
    case Stage::REPLY_HEAD:
      if (receive_reply_tail()) return false;
      [[fallthrough]];
    case Stage::REPLY_TAIL:
      decode_response_list(resp_buf_.data(), announced_length(resp_buf_.data()), resp_);
      resolve_items(resp_, cache_);
      note_agreed_flags();
      stage_ = Stage::DONE;
      return true;
    case Stage::BROADCAST:
      note_agreed_flags();
      stage_ = Stage::DONE;
      return true;
    default: return stage_ == Stage::DONE;
  }
}

void ControlRound::note_agreed_flags() {
  transport_.set_wide_direct((resp_.flags & kRespWideCopies) != 0);  // before any item of this list runs
  transport_.set_single_copy_allreduce((resp_.flags & kRespSingleCopyAllreduce) != 0);
  express_on_ = (resp_.flags & kRespExpress) != 0;
  // The flag comes with one INLINE or CACHED item (decide_and_broadcast): its bytes size the express heads.
  if (express_on_)
    express_.set_head_payload(resp_.n == 1 && resp_.items[0].type == ItemType::INLINE ? resp_.items[0].data.size() : 0);
}

void ControlRound::drive(Deadline deadline) {
  while (transport_.pending() > 0) {
    completed_.clear();
    transport_.progress(completed_, deadline);
  }
}

void ControlRound::gather_tails() {
  for (int r = 1; r < size_; ++r) {
    std::vector<uint8_t>& slot = slots_[static_cast<size_t>(r)];
    size_t len = announced_length(slot.data());
    if (len > kSlotBytes) {
      slot.resize(len);
      transport_.post_recv(r, slot.data() + kSlotBytes, len - kSlotBytes);
    }
  }
  stage_ = Stage::GATHER_TAILS;
}

void ControlRound::decide_and_broadcast() {
  decode_rank_message(send_buf_.data(), announced_length(send_buf_.data()), msgs_[0]);
  for (int r = 1; r < size_; ++r) {
    const std::vector<uint8_t>& slot = slots_[static_cast<size_t>(r)];
    decode_rank_message(slot.data(), announced_length(slot.data()), msgs_[static_cast<size_t>(r)]);
  }
  coordinator_->decide(msgs_, resp_);
  // Express mode: on after kExpressAfter steady rounds (so a one-off request never pays for a missed
  // express exchange), off after a miss until the rounds are steady again.
  if (last_express_ == Express::MISS) steady_ = 0;
  const bool one_cached = resp_.n == 1 && (resp_.flags & ~kRespModeFlags) == 0 &&
                          (resp_.items[0].type == ItemType::INLINE || resp_.items[0].type == ItemType::CACHED) &&
                          ExpressRound::decides(cache_.entry(resp_.items[0].pos));
  steady_ = one_cached ? steady_ + 1 : 0;
  if (steady_ >= kExpressAfter) resp_.flags |= kRespExpress;
  encode_response_list(resp_, resp_buf_);
  for (int r = 1; r < size_; ++r) {
    transport_.post_send(r, resp_buf_.data(), kSlotBytes);
    if (resp_buf_.size() > kSlotBytes) {
      transport_.post_send(r, resp_buf_.data() + kSlotBytes, resp_buf_.size() - kSlotBytes);
    }
  }
  stage_ = Stage::BROADCAST;
}

bool ControlRound::receive_reply_tail() {
  size_t len = announced_length(resp_buf_.data());
  if (len <= kSlotBytes) return false;
  resp_buf_.resize(len);
  transport_.post_recv(0, resp_buf_.data() + kSlotBytes, len - kSlotBytes);
  stage_ = Stage::REPLY_TAIL;
  return true;
}

}  // namespace phv
