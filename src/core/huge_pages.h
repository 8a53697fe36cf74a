#pragma once
// Anonymous memory for weights that a decode step streams: 2 MiB aligned and advised for
// transparent huge pages, so reading it pays no TLB miss per 4 KiB page and the hardware
// prefetchers do not stop at every page boundary. Advice only: where the kernel gives no
// huge pages, the memory is ordinary 4 KiB pages.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace moe {

// `bytes` (at least 1) of zeroed memory, unmapped when the last owner lets go. Fails with
// `what` in the message when the memory cannot be had.
std::shared_ptr<uint8_t> allocate_huge_pages(size_t bytes, const char* what);

// Whether loading moves the weights it multiplies with into such memory (and regroups
// q8_0 where the AVX-512 path runs): MOENGINE_REGROUP is not 0. With 0 they stay in the
// file's pages and layout, for comparisons.
bool weights_move_here();

}  // namespace moe
