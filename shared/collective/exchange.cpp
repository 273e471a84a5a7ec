#include "shared/collective/detail/exchange.hpp"

#include <cstring>

#include "shared/collective/detail/ops.hpp"

namespace fedcore::collective::detail {

int power_of_two_floor(int p) noexcept {
  int q = 1;
  while (q * 2 <= p)
    q *= 2;
  return q;
}

std::uint32_t log2_of(int q) noexcept {
  std::uint32_t bits = 0;
  while ((1 << bits) < q)
    ++bits;
  return bits;
}

Exchange::Exchange(Communicator& comm, Envelope envelope, std::size_t whole_elements,
                   std::size_t max_segment_bytes, Clock::time_point deadline)
    : t_(comm.transport()),
      envelope_(std::move(envelope)),
      max_segment_bytes_(max_segment_bytes),
      max_segments_(segment_count(whole_elements, sizeof(float), max_segment_bytes)),
      deadline_(deadline) {}

std::size_t Exchange::segments_for(std::size_t elements) const noexcept {
  return segment_count(elements, sizeof(float), max_segment_bytes_);
}

void Exchange::stamp(std::uint32_t step, std::size_t j, std::size_t elements) {
  envelope_.segment = static_cast<std::uint32_t>(step * max_segments_ + j);
  envelope_.length = elements * sizeof(float);
}

void Exchange::send(int peer, std::uint32_t step, std::span<const float> data) {
  const std::size_t segments = segments_for(data.size());
  for (std::size_t j = 0; j < segments; ++j) {
    const Range seg = chunk_range(data.size(), segments, j);
    stamp(step, j, seg.size);
    t_.post_send(peer, envelope_, bytes_of(data.subspan(seg.begin, seg.size)));
  }
}

result<void> Exchange::swap_add(int peer, std::uint32_t step, std::span<float> data) {
  const std::size_t segments = segments_for(data.size());
  for (std::size_t j = 0; j < segments; ++j) {
    const Range seg = chunk_range(data.size(), segments, j);
    stamp(step, j, seg.size);
    t_.post_send(peer, envelope_,
                 bytes_of(std::span<const float>(data).subspan(seg.begin, seg.size)));
    auto got = t_.recv(peer, envelope_, deadline_);
    if (!got)
      return got.error();
    if (auto sent = t_.wait_sends(deadline_); !sent)
      return sent.error();
    add_received(data.subspan(seg.begin, seg.size), *got);
    t_.release(peer);
  }
  return {};
}

result<void> Exchange::receive(int peer, std::uint32_t step, std::span<float> data, Merge merge,
                               Sends sends) {
  const std::size_t segments = segments_for(data.size());
  for (std::size_t j = 0; j < segments; ++j) {
    const Range seg = chunk_range(data.size(), segments, j);
    stamp(step, j, seg.size);
    auto got = t_.recv(peer, envelope_, deadline_);
    if (!got)
      return got.error();
    // A small send is normally handed to the kernel long before the peer's answer is
    // here, so this wait is almost always free.
    if (sends == Sends::wait) {
      if (auto sent = t_.wait_sends(deadline_); !sent)
        return sent.error();
    }
    if (merge == Merge::add) {
      add_received(data.subspan(seg.begin, seg.size), *got);
    } else if (seg.size > 0) {
      std::memcpy(data.data() + seg.begin, got->data(), seg.size * sizeof(float));
    }
    t_.release(peer);
  }
  return {};
}

}  // namespace fedcore::collective::detail
