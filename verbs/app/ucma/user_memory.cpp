// Runs in the application process (the rdma_cm shim, librrdma_ucma.so).
//
// process_vm_readv/writev on our own pid: the kernel checks the addresses and answers EFAULT
// where a memcpy would fault. Where a seccomp filter forbids them (EPERM) or the kernel lacks
// them (ENOSYS), a plain copy is what is left.
#include "verbs/app/ucma/user_memory.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rrdma::ucma_shim {
namespace {

void* as_pointer(std::uint64_t address) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)); }

// 0, EFAULT, or -1 when the kernel would not do it and the caller must copy itself.
int checked_copy(void* to, void* from, std::size_t length, bool reading) {
  if (length == 0) return 0;
  iovec local{reading ? to : from, length};
  iovec remote{reading ? from : to, length};
  const ssize_t copied = reading ? ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0)
                                 : ::process_vm_writev(::getpid(), &local, 1, &remote, 1, 0);
  if (copied == static_cast<ssize_t>(length)) return 0;
  if (copied < 0 && (errno == EPERM || errno == ENOSYS)) return -1;
  return EFAULT;
}

}  // namespace

int copy_from_application(void* to, std::uint64_t from, std::size_t length) {
  const int result = checked_copy(to, as_pointer(from), length, true);
  if (result >= 0) return result;
  std::memcpy(to, as_pointer(from), length);
  return 0;
}

int copy_to_application(std::uint64_t to, const void* from, std::size_t length) {
  const int result = checked_copy(as_pointer(to), const_cast<void*>(from), length, false);
  if (result >= 0) return result;
  std::memcpy(as_pointer(to), from, length);
  return 0;
}

}  // namespace rrdma::ucma_shim
