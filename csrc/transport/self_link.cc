#include "transport/self_link.h"

#include <cstring>

namespace phv {

void SelfLink::post_send(Transfer t) {
  sends_.push_back(t);
  match();
}

void SelfLink::post_recv(Transfer t) {
  recvs_.push_back(t);
  match();
}

void SelfLink::match() {
  while (!sends_.empty() && !recvs_.empty()) {
    Transfer& s = sends_.front();
    Transfer& r = recvs_.front();
    if (s.len != r.len)
      host_.fail(ErrorKind::INTERNAL,
                 "message to self of " + std::to_string(s.len) + " bytes, but the posted receive expects " +
                     std::to_string(r.len),
                 kNoPeer);
    if (s.len) std::memmove(r.buf, s.buf, s.len);
    host_.complete(s);
    host_.complete(r);
    sends_.pop_front();
    recvs_.pop_front();
  }
}

void SelfLink::close() {
  sends_.clear();
  recvs_.clear();
}

}  // namespace phv
