// `rrdma-vnic exec`'s sysfs view (docs/IBVERBS.md "The sysfs view"): the program gets a
// mount namespace of its own in which /sys/class is a small read-only tmpfs holding
// infiniband/NAME and infiniband_verbs/uverbsN for the vnics (verbs/app/sysfs_view.h), with
// every class directory the host has bound back in place. The host's mounts never change.
#pragma once

#include <string>
#include <vector>

#include "verbs/app/sysfs_view.h"

namespace rrdma::cli {

// The values of `device` (every running vnic when empty, in name order) as their daemons
// report them now. A vnic that cannot be queried is left out, with a line on stderr.
std::vector<verbs::sysfs::DeviceValues> query_vnics(const std::string& device);

// Moves this process into a new mount namespace (and, when not root, a user namespace that
// maps its own uid and gid to themselves: the kernel and the daemon see the same
// credentials) and lays `entries` out over /sys/class. Empty when done; otherwise why not,
// and the process sees the host's /sys/class unchanged. Call it single-threaded, right
// before execvp.
std::string enter_sysfs_view(const std::vector<verbs::sysfs::Entry>& entries);

}  // namespace rrdma::cli
