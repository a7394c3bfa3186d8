// Runs in the application process (the rdma_cm shim, librrdma_ucma.so).
//
// What the kernel's ucma file does for open() and write(), done by asking the daemon:
// open makes a channel (a socketpair, one end handed to the daemon), and each write() is one
// command, answered before write() returns, its response copied to the user pointer the
// command carries (docs/RDMA_CM.md, "The application side: the shim").
#pragma once

#include <sys/types.h>

#include <cstddef>

#include "verbs/app/ucma/fd_table.h"

namespace rrdma::ucma_shim {

// open() of the device path with these flags: the application's descriptor, or -1 and errno.
int open_channel(int flags);

// write() of `length` bytes at `buffer` on the channel `fd`: `length`, or -1 and errno.
ssize_t write_command(int fd, const ChannelRecord& channel, const void* buffer, std::size_t length);

}  // namespace rrdma::ucma_shim
