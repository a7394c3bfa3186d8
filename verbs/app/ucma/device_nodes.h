// Runs in the application process (the shim, librrdma_ucma.so).
//
// The uverbs character devices of the sysfs view. rdma-core names a verbs device's node
// /dev/infiniband/uverbsN (ibv_device.dev_name), and software checks that it is there before
// it believes the device is: UCX takes a device only if that path is a character device it may
// open for reading and writing (uct_ib_device_is_accessible). Our libibverbs never opens it,
// and no kernel driver stands behind it; /dev cannot be laid over as /sys/class is (a host
// without RDMA has no /dev/infiniband to mount on, and covering all of /dev would hide nodes
// hot-plugged later). So the shim answers the stat and access family for
// /dev/infiniband/uverbsN when the path does not exist and the sysfs view `rrdma-vnic exec`
// laid out has /sys/class/infiniband_verbs/uverbsN: a character device 231:(192 + N), mode
// 0666, as the kernel's uverbs class and udev make it. Opening it fails with ENXIO, what a
// device node without a driver gives. docs/IBVERBS.md, "The sysfs view".
#pragma once

#include <sys/stat.h>

#include <optional>

namespace rrdma::ucma_shim {

// N when `path` is exactly "/dev/infiniband/uverbsN" (N decimal, no leading zero, below
// 1000) and the sysfs view has infiniband_verbs/uverbsN. Looks at the view only for such a
// path: every other path costs one comparison of its first bytes.
std::optional<unsigned> uverbs_node(const char* path);

// The kernel's numbers for uverbs nodes (drivers/infiniband/core/uverbs_main.c).
inline constexpr unsigned kUverbsMajor = 231;
inline constexpr unsigned kUverbsBaseMinor = 192;

// What a stat of node N says: /dev/null's device, owner and times (a node of the same /dev),
// then the node's own type, mode, device number and an inode of its own.
void describe_node(unsigned n, struct stat* buf);
void describe_node(unsigned n, struct stat64* buf);
void describe_node(unsigned n, struct statx* buf);

}  // namespace rrdma::ucma_shim
