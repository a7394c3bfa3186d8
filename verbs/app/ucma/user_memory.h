// Runs in the application process (the rdma_cm shim, librrdma_ucma.so).
//
// Copies to and from addresses the application gave (the write() buffer, `response`,
// SET_OPTION's `optval`) the way the kernel's copy_from_user/copy_to_user do: a bad address
// is EFAULT, not a crash inside a library the application did not ask for.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rrdma::ucma_shim {

// 0 or EFAULT.
int copy_from_application(void* to, std::uint64_t from, std::size_t length);
int copy_to_application(std::uint64_t to, const void* from, std::size_t length);

}  // namespace rrdma::ucma_shim
