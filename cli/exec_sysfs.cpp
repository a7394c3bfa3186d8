// Why a tmpfs over /sys/class with each class bound back, and not an overlay or a tmpfs on
// /sys/class/infiniband alone: sysfs cannot create a directory (infiniband/ is missing on a
// host without RDMA modules, and mkdir in sysfs is EPERM even for root), and overlayfs over a
// sysfs lower layer, though this kernel mounts it, is undefined once the lower layer changes
// (Documentation/filesystems/overlayfs.rst, "Changes to underlying filesystems"), which sysfs
// does whenever a device comes or goes. A bind of each /sys/class/X is the live directory
// itself: its links (net/eth0 -> ../../devices/...) resolve as on the host. Measured in
// docs/IBVERBS.md "The sysfs view".
#include "cli/exec_sysfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>

#include "verbs/app/client.h"
#include "vnic/lifecycle.h"

namespace rrdma::cli {
namespace {

namespace sysfs = verbs::sysfs;

// More GIDs than any table we report would be a daemon answering nonsense: the view stops
// there rather than asking forever.
constexpr std::uint32_t kMaxGids = 256;
// The tmpfs holds a few KB per vnic; the limit keeps a runaway from filling memory.
constexpr const char* kTmpfsOptions = "mode=0755,size=1m,nr_inodes=16384";
constexpr const char* kTmpfsSource = "rrdma-sysfs-view";

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

int query_one(const std::string& name, sysfs::DeviceValues& out) {
  auto opened = verbs::client::Context::open(name);
  if (!opened.ok()) return opened.error;
  verbs::client::Context& context = *opened.value;
  out.name = name;
  out.node_guid = context.node_guid();
  if (const int error = context.query_port(1, out.port); error != 0) return error;
  const std::uint32_t count = std::min(out.port.gid_tbl_len, kMaxGids);
  for (std::uint32_t index = 0; index < count; ++index) {
    verbs::Gid gid;
    out.gids.push_back(context.query_gid(1, static_cast<int>(index), gid) == 0 ? std::optional(gid) : std::nullopt);
  }
  out.port.gid_tbl_len = count;
  return 0;
}

// Writes a file of the view (0444, as sysfs attributes that only the kernel writes).
bool write_file(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0444);
  if (fd < 0) return false;
  const bool whole = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ::close(fd);
  return whole;
}

bool write_map(const char* file, const std::string& text) {
  const int fd = ::open(file, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool whole = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return whole;
}

// A mount namespace of our own; without root, inside a user namespace that maps our own
// uid and gid to themselves (user_namespaces(7): an unprivileged process may map exactly
// its effective ids, once setgroups is denied). The kernel's ids of the process do not
// change, so SO_PEERCRED and /proc/PID/status as the daemon reads them do not either.
std::string new_mount_namespace() {
  if (::geteuid() == 0) return ::unshare(CLONE_NEWNS) == 0 ? "" : errno_text("unshare(CLONE_NEWNS)");
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return errno_text("unshare(CLONE_NEWUSER|CLONE_NEWNS)");
  if (!write_map("/proc/self/setgroups", "deny") ||
      !write_map("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1") ||
      !write_map("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"))
    return errno_text("the user namespace's id maps");
  return {};
}

// The class directories the host has now, but those the view replaces. (Through a
// descriptor of its own: the O_PATH one that the binds go through cannot be read.)
std::optional<std::vector<std::string>> host_classes(int class_fd) {
  std::vector<std::string> names;
  const int fd = ::openat(class_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* listing = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (listing == nullptr) {
    if (fd >= 0) ::close(fd);
    return std::nullopt;
  }
  while (const dirent* entry = ::readdir(listing)) {
    const std::string_view name(entry->d_name);
    if (name == "." || name == ".." || name == sysfs::kDeviceClass || name == sysfs::kVerbsClass) continue;
    names.emplace_back(name);
  }
  ::closedir(listing);
  std::sort(names.begin(), names.end());
  return names;
}

std::string bind_classes_back(int class_fd, const std::string& root) {
  const auto names = host_classes(class_fd);
  if (!names) return errno_text("list the host's " + root);
  for (const std::string& name : *names) {
    struct stat st {};
    if (::fstatat(class_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) continue;
    const std::string target = root + "/" + name;
    const std::string source = "/proc/self/fd/" + std::to_string(class_fd) + "/" + name;
    if (::mkdir(target.c_str(), 0755) != 0) return errno_text("mkdir " + target);
    if (::mount(source.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
      return errno_text("bind " + target);
  }
  return {};
}

std::string write_entries(const std::vector<sysfs::Entry>& entries, const std::string& root) {
  for (const sysfs::Entry& entry : entries) {
    const std::string path = root + "/" + entry.path;
    if (entry.kind == sysfs::Entry::Kind::Directory) {
      if (::mkdir(path.c_str(), 0755) != 0) return errno_text("mkdir " + path);
    } else if (!write_file(path, entry.content)) {
      return errno_text("write " + path);
    }
  }
  return {};
}

// The tmpfs on /sys/class, filled, then read-only. On failure the caller detaches it.
std::string lay_out(const std::vector<sysfs::Entry>& entries, int class_fd) {
  const std::string root(sysfs::kClassRoot);
  // Our mounts must not propagate back to the host's namespace (mount_namespaces(7): a
  // shared "/" would); slave still lets later host mounts reach the program.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return errno_text("make / a slave mount");
  constexpr unsigned long kFlags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  if (::mount(kTmpfsSource, root.c_str(), "tmpfs", kFlags, kTmpfsOptions) != 0)
    return errno_text("mount a tmpfs on " + root);
  if (std::string error = bind_classes_back(class_fd, root); !error.empty()) return error;
  if (std::string error = write_entries(entries, root); !error.empty()) return error;
  if (::mount(nullptr, root.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | kFlags, nullptr) != 0)
    return errno_text("remount " + root + " read-only");
  return {};
}

}  // namespace

std::vector<sysfs::DeviceValues> query_vnics(const std::string& device) {
  std::vector<std::string> names;
  if (!device.empty()) {
    names.push_back(device);
  } else {
    for (const auto& entry : verbs::client::list_devices()) names.push_back(entry.name);
  }
  std::vector<sysfs::DeviceValues> values;
  for (const std::string& name : names) {
    sysfs::DeviceValues one;
    if (const int error = query_one(name, one); error != 0) {
      std::cerr << "rrdma-vnic: vnic " << name << " is left out of the sysfs view: " << std::strerror(error) << "\n";
      continue;
    }
    // A --netdev device runs on an interface of the kernel's: its GIDs' netdev is that one.
    if (const auto status = vnic::query_vnic(name, "status");
        status.reply && status.reply->value("netdev", nlohmann::json()).is_string()) {
      one.netdev = (*status.reply)["netdev"].get<std::string>();
    }
    values.push_back(std::move(one));
  }
  return values;
}

std::string enter_sysfs_view(const std::vector<sysfs::Entry>& entries) {
  const std::string root(sysfs::kClassRoot);
  if (std::string error = new_mount_namespace(); !error.empty()) return error;
  // Opened in the new namespace (a bind's source must be a mount of the caller's own
  // namespace: EINVAL otherwise), held across the tmpfs mount: the binds come from the
  // host's /sys/class through it.
  const int class_fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (class_fd < 0) return errno_text("open " + root);
  const std::string error = lay_out(entries, class_fd);
  // Whatever part was mounted goes: the program sees the host's /sys/class whole.
  if (!error.empty()) ::umount2(root.c_str(), MNT_DETACH);
  ::close(class_fd);
  return error;
}

}  // namespace rrdma::cli
