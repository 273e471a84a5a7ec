#include "shared/collective/communicator.hpp"

#include "shared/util/assert.hpp"

namespace fedcore::collective {

const char* op_type_name(OpType op) noexcept {
  switch (op) {
    case OpType::allreduce:
      return "allreduce";
    case OpType::broadcast:
      return "broadcast";
    case OpType::allgather:
      return "allgather";
    case OpType::reduce_scatter:
      return "reduce_scatter";
    case OpType::barrier:
      return "barrier";
    case OpType::send_recv:
      return "send_recv";
  }
  return "unknown";
}

std::string to_string(const Envelope& e) {
  return "job=" + e.job + " seq=" + std::to_string(e.seq) + " op=" + op_type_name(e.op) +
         " tag=" + std::to_string(e.tag) + " bytes=" + std::to_string(e.bytes) +
         " segment=" + std::to_string(e.segment) + " length=" + std::to_string(e.length);
}

result<void> check_envelope(const Envelope& expected, const Envelope& got, int peer) {
  if (expected == got)
    return {};
  return fail(errc::aborted, "collective desync with rank " + std::to_string(peer) +
                                 ": expected {" + to_string(expected) + "}, received {" +
                                 to_string(got) + "}");
}

Communicator::Communicator(std::unique_ptr<Transport> transport, std::string job,
                           std::chrono::milliseconds default_timeout)
    : transport_(std::move(transport)), job_(std::move(job)), default_timeout_(default_timeout) {
  FEDCORE_ASSERT(transport_ != nullptr, "communicator needs a transport");
  FEDCORE_ASSERT(default_timeout_.count() > 0, "default timeout must be positive");
  send_seq_.assign(transport_->size(), 0);
  recv_seq_.assign(transport_->size(), 0);
}

result<Envelope> Communicator::begin(OpType op, std::uint64_t bytes) {
  if (failure_)
    return fail(errc::aborted, "communicator failed earlier: " + failure_->message);
  Envelope e;
  e.job = job_;
  e.seq = ++seq_;
  e.op = op;
  e.bytes = bytes;
  return e;
}

Clock::time_point Communicator::deadline(std::chrono::milliseconds timeout) const noexcept {
  return Clock::now() + (timeout.count() > 0 ? timeout : default_timeout_);
}

Envelope Communicator::next_send(int peer, std::uint32_t tag, std::uint64_t bytes) {
  Envelope e;
  e.job = job_;
  e.seq = ++send_seq_[peer];
  e.op = OpType::send_recv;
  e.tag = tag;
  e.bytes = bytes;
  e.length = bytes;
  return e;
}

Envelope Communicator::next_recv(int peer, std::uint32_t tag, std::uint64_t bytes) {
  Envelope e;
  e.job = job_;
  e.seq = ++recv_seq_[peer];
  e.op = OpType::send_recv;
  e.tag = tag;
  e.bytes = bytes;
  e.length = bytes;
  return e;
}

error Communicator::fail_with(error e) noexcept {
  if (!failure_)
    failure_ = e;
  transport_->abort(e);
  return e;
}

}  // namespace fedcore::collective
