// Device discovery: a device is a running vnic, found by its control socket
// $RRDMA_RUN_DIR/NAME.sock (default /run/rrdma, docs/VERBS_DATAPATH.md "Finding a device").
// RRDMA_DEVICES=NAME[,NAME...] restricts the list to those vnics (what `rrdma-vnic exec
// --dev` sets). There is no sysfs: the device's paths name the socket.
#include <dirent.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "verbs/ibverbs/shim.h"

namespace rrdma::ibverbs {
namespace {

constexpr std::string_view kSocketSuffix = ".sock";

// Devices by name, never freed (see DeviceBox).
struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<DeviceBox>> devices;
};
Registry& registry() {
  static Registry* instance = new Registry;  // never destroyed: programs call verbs from atexit
  return *instance;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() >= IBV_SYSFS_NAME_MAX || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

// A socket file outlives a daemon killed with SIGKILL: only one that accepts is a device.
bool daemon_listening(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) return false;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return ok;
}

std::vector<std::string> names_in_run_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* stream = ::opendir(dir.c_str());
  if (stream == nullptr) return names;
  while (const dirent* entry = ::readdir(stream)) {
    const std::string_view file = entry->d_name;
    if (file.size() <= kSocketSuffix.size() || !file.ends_with(kSocketSuffix)) continue;
    names.emplace_back(file.substr(0, file.size() - kSocketSuffix.size()));
  }
  ::closedir(stream);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> names_from_environment(const char* list) {
  std::vector<std::string> names;
  std::string_view rest = list;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const auto name = rest.substr(0, comma);
    if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end())
      names.emplace_back(name);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return names;
}

void copy_string(char (&out)[IBV_SYSFS_NAME_MAX], const std::string& text) {
  std::snprintf(out, sizeof out, "%s", text.c_str());
}
void copy_path(char (&out)[IBV_SYSFS_PATH_MAX], const std::string& text) {
  std::snprintf(out, sizeof out, "%s", text.c_str());
}

DeviceBox* device_named(Registry& reg, const std::string& name, const std::string& dir) {
  for (auto& device : reg.devices)
    if (name == device->device.name) return device.get();
  auto box = std::make_unique<DeviceBox>();
  std::memset(&box->device, 0, sizeof box->device);
  box->device.node_type = IBV_NODE_CA;
  box->device.transport_type = IBV_TRANSPORT_IB;
  copy_string(box->device.name, name);
  copy_string(box->device.dev_name, "rrdma-" + name);
  copy_path(box->device.dev_path, dir + "/" + name + ".sock");
  copy_path(box->device.ibdev_path, dir + "/" + name + ".sock");
  box->index = static_cast<int>(reg.devices.size());
  box->guid = 0;
  box->guid_known = false;
  reg.devices.push_back(std::move(box));
  return reg.devices.back().get();
}

}  // namespace

std::string run_dir() {
  const char* dir = std::getenv("RRDMA_RUN_DIR");
  return dir != nullptr && *dir != '\0' ? dir : "/run/rrdma";
}

}  // namespace rrdma::ibverbs

using namespace rrdma::ibverbs;

extern "C" {

RRDMA_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  const std::string dir = run_dir();
  const char* wanted = std::getenv("RRDMA_DEVICES");
  std::vector<std::string> names =
      wanted != nullptr && *wanted != '\0' ? names_from_environment(wanted) : names_in_run_dir(dir);
  std::erase_if(names, [&](const std::string& name) {
    return !valid_name(name) || !daemon_listening(dir + "/" + name + ".sock");
  });
  auto** list = static_cast<ibv_device**>(std::calloc(names.size() + 1, sizeof(ibv_device*)));
  if (list == nullptr) return fail_null<ibv_device*>(ENOMEM);
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  for (std::size_t i = 0; i < names.size(); ++i) list[i] = &device_named(reg, names[i], dir)->device;
  if (num_devices != nullptr) *num_devices = static_cast<int>(names.size());
  return list;
}

RRDMA_EXPORT void ibv_free_device_list(ibv_device** list) { std::free(list); }

RRDMA_EXPORT const char* ibv_get_device_name(ibv_device* device) {
  return device != nullptr ? device->name : nullptr;
}

RRDMA_EXPORT int ibv_get_device_index(ibv_device* device) {
  return device != nullptr ? box_of(device)->index : -1;
}

}  // extern "C"
