// The application side of tests/ucma: run by ucma_shim_test.cpp with librrdma_ucma.so
// preloaded, against the fake daemon the test plays. `ucma_probe raw` speaks the ucma ABI
// itself with open()/write() of <rdma/rdma_user_cm.h> structures, as librdmacm does
// (`ucma_probe signals`: a blocking GET_EVENT under SIGALRM with and without SA_RESTART);
// `ucma_probe librdmacm` goes through Debian's librdmacm (and our libibverbs.so.1, which the
// test puts on LD_LIBRARY_PATH; ucma_probe_librdmacm.cpp, apart because rdma_cma.h and the
// uapi header cannot both be included). Each step is checked here; the test checks what the daemon
// saw. Exit 0 when every check held; otherwise the first failed check on stderr, exit 1.
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_user_cm.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "tests/alarm_ticks.h"
#include "tests/ucma/ucma_probe.h"

namespace {

constexpr const char* kDevicePath = "/dev/infiniband/rdma_cm";
constexpr std::uint64_t kUid = 0x1122334455667788;
constexpr std::uint64_t kNodeGuid = 0x0252'44ff'fe01'0203;  // what the fake daemon answers

// One ucma command as librdmacm writes it: the header, then the structure.
template <typename Body>
struct Packet {
  rdma_ucm_cmd_hdr header;
  Body body;
};

template <typename Body>
ssize_t command(int fd, std::uint32_t cmd, const Body& body, std::uint16_t out = 0) {
  Packet<Body> packet{{cmd, static_cast<std::uint16_t>(sizeof(Body)), out}, body};
  return ::write(fd, &packet, sizeof packet);
}

template <typename Body>
bool succeeds(int fd, std::uint32_t cmd, const Body& body, std::uint16_t out = 0) {
  return command(fd, cmd, body, out) == static_cast<ssize_t>(sizeof(Packet<Body>));
}

template <typename Body>
bool fails_with(int fd, std::uint32_t cmd, const Body& body, int error, std::uint16_t out = 0) {
  errno = 0;
  return command(fd, cmd, body, out) == -1 && errno == error;
}

std::uint64_t pointer(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

void set_nonblocking(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL);
  CHECK(::fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK) == 0);
}

bool get_event(int fd, rdma_ucm_event_resp& event) {
  rdma_ucm_get_event body{pointer(&event)};
  std::memset(&event, 0, sizeof event);
  return succeeds(fd, RDMA_USER_CM_CMD_GET_EVENT, body, sizeof event);
}

std::uint32_t create_id(int fd, std::uint64_t uid) {
  rdma_ucm_create_id_resp created{};
  rdma_ucm_create_id body{};
  body.uid = uid;
  body.response = pointer(&created);
  body.ps = RDMA_PS_TCP;
  body.qp_type = 2;  // IBV_QPT_RC
  CHECK(succeeds(fd, RDMA_USER_CM_CMD_CREATE_ID, body, sizeof created));
  return created.id;
}

std::uint32_t destroy_id(int fd, std::uint32_t id) {
  rdma_ucm_destroy_id_resp destroyed{};
  rdma_ucm_destroy_id body{pointer(&destroyed), id, 0};
  CHECK(succeeds(fd, RDMA_USER_CM_CMD_DESTROY_ID, body, sizeof destroyed));
  return destroyed.events_reported;
}

// What never reaches the daemon: calls on other descriptors, and writes ucma_write refuses.
void check_untouched_calls() {
  errno = 0;
  CHECK(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 20) == -1 && errno == EPROTONOSUPPORT);  // NETLINK_RDMA
  const int route = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0);                          // NETLINK_ROUTE
  CHECK(route >= 0);
  CHECK(::close(route) == 0);
  int pipe_ends[2];
  CHECK(::pipe(pipe_ends) == 0);
  CHECK(::write(pipe_ends[1], "plain", 5) == 5);
  char back[5];
  CHECK(::read(pipe_ends[0], back, 5) == 5 && std::memcmp(back, "plain", 5) == 0);
  CHECK(::close(pipe_ends[0]) == 0 && ::close(pipe_ends[1]) == 0);
}

void check_looks_like_the_device(int fd) {
  struct stat st {};
  CHECK(::fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && (st.st_mode & 0777) == 0666 && st.st_rdev == 0);
  struct stat at {};
  CHECK(::fstatat(fd, "", &at, AT_EMPTY_PATH) == 0 && S_ISCHR(at.st_mode));
  struct statx sx {};
  CHECK(::statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &sx) == 0 && S_ISCHR(sx.stx_mode));
  CHECK(sx.stx_rdev_major == 0 && sx.stx_rdev_minor == 0);
}

void check_refused_writes(int fd) {
  const rdma_ucm_cmd_hdr short_header{RDMA_USER_CM_CMD_CREATE_ID, 0, 0};
  errno = 0;
  CHECK(::write(fd, &short_header, 4) == -1 && errno == EINVAL);
  Packet<rdma_ucm_create_id> overlong{{RDMA_USER_CM_CMD_CREATE_ID, 100, 4}, {}};
  errno = 0;
  CHECK(::write(fd, &overlong, sizeof overlong) == -1 && errno == EINVAL);  // in + 8 > len
  CHECK(fails_with(fd, 23, rdma_ucm_destroy_id{}, EINVAL));                  // no such command
  CHECK(fails_with(fd, RDMA_USER_CM_CMD_GET_OPTION, rdma_ucm_destroy_id{}, ENOSYS));
  rdma_ucm_create_id_resp created{};
  rdma_ucm_create_id small_out{};
  small_out.response = pointer(&created);
  CHECK(fails_with(fd, RDMA_USER_CM_CMD_CREATE_ID, small_out, ENOSPC, 2));
}

// The fake answers one stale marker EAGAIN, then queues ESTABLISHED: the shim skips the first.
void check_blocking_event(int fd, std::uint32_t id) {
  rdma_ucm_event_resp event{};
  CHECK(get_event(fd, event));
  CHECK(event.uid == kUid && event.id == id && event.event == ucma_probe::kEstablished && event.status == 0);
  CHECK(event.param.conn.private_data_len == 5 && std::memcmp(event.param.conn.private_data, "hello", 5) == 0);
  CHECK(event.param.conn.responder_resources == 1 && event.param.conn.initiator_depth == 2);
}

void check_polled_event(int fd, std::uint32_t id) {
  pollfd watch{fd, POLLIN, 0};
  CHECK(::poll(&watch, 1, 120'000) == 1 && (watch.revents & POLLIN) != 0);
  set_nonblocking(fd, true);
  rdma_ucm_event_resp event{};
  CHECK(get_event(fd, event));
  CHECK(event.id == id && event.event == ucma_probe::kDisconnected);
  errno = 0;
  CHECK(!get_event(fd, event) && errno == EAGAIN);
  set_nonblocking(fd, false);
}

// rping's pattern: one thread waits in GET_EVENT while another runs commands on the same
// channel. The fake answers the waiter's first round EAGAIN (a stale marker), then marks
// `other` readable; only after our DISCONNECT does it queue the event the waiter gets. Were
// the command mutex held while waiting for a marker, DISCONNECT would never arrive.
void check_event_while_commanding(int fd, int other) {
  CHECK(succeeds(fd, RDMA_USER_CM_CMD_NOTIFY, rdma_ucm_notify{77, 0}));  // the cue for the stale marker
  rdma_ucm_event_resp event{};
  bool received = false;
  std::thread waiter([&] { received = get_event(fd, event); });
  pollfd watch{other, POLLIN, 0};
  CHECK(::poll(&watch, 1, 120'000) == 1);
  CHECK(succeeds(fd, RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{77}));
  waiter.join();
  CHECK(received && event.id == 77 && event.event == ucma_probe::kEstablished);
}

void check_migrate(int to, int from) {
  rdma_ucm_migrate_resp migrated{};
  rdma_ucm_migrate_id body{pointer(&migrated), 77, static_cast<std::uint32_t>(from)};
  CHECK(succeeds(to, RDMA_USER_CM_CMD_MIGRATE_ID, body, sizeof migrated) && migrated.events_reported == 3);
  int pipe_ends[2];
  CHECK(::pipe(pipe_ends) == 0);
  body.fd = static_cast<std::uint32_t>(pipe_ends[0]);
  CHECK(fails_with(to, RDMA_USER_CM_CMD_MIGRATE_ID, body, EINVAL, sizeof migrated));  // not a ucma file
  body.fd = 1000;
  CHECK(fails_with(to, RDMA_USER_CM_CMD_MIGRATE_ID, body, ENOENT, sizeof migrated));  // not open
  ::close(pipe_ends[0]);
  ::close(pipe_ends[1]);
}

void check_query_route(int fd) {
  rdma_ucm_query_route_resp route{};
  rdma_ucm_query body{pointer(&route), 77, 0};
  CHECK(succeeds(fd, RDMA_USER_CM_CMD_QUERY_ROUTE, body, sizeof route) && route.node_guid == kNodeGuid);
  body.response = 8;  // no such address: EFAULT, as copy_to_user gives
  CHECK(fails_with(fd, RDMA_USER_CM_CMD_QUERY_ROUTE, body, EFAULT, sizeof route));
}

// A dup is the same channel; a number closed behind the shim's back (close_range) and reused
// by another file is that file again.
void check_dup_and_reuse(int fd) {
  const int copy = ::dup(fd);
  CHECK(copy >= 0);
  CHECK(create_id(copy, kUid + 1) == 78);
  CHECK(::syscall(SYS_close_range, copy, copy, 0) == 0);
  const int reused = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  CHECK(reused == copy);
  CHECK(::write(reused, "abc", 3) == 3);
  struct stat st {};
  CHECK(::fstat(reused, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev != 0);  // /dev/null's own
  CHECK(::close(reused) == 0);
}

// A forked child has its own command connection and keeps the channel it inherited.
void check_fork(int fd) {
  const pid_t child = ::fork();
  CHECK(child >= 0);
  if (child == 0) _exit(destroy_id(fd, 78) == 0 ? 0 : 1);
  int status = 0;
  CHECK(::waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// The fake daemon goes away while we wait for an event: ENODEV, then ENODEV for commands.
void check_daemon_death() {
  const int fd = ::open(kDevicePath, O_RDWR | O_CLOEXEC);
  CHECK(fd >= 0);
  rdma_ucm_event_resp event{};
  errno = 0;
  CHECK(!get_event(fd, event) && errno == ENODEV);
  rdma_ucm_create_id_resp created{};
  rdma_ucm_create_id body{};
  body.response = pointer(&created);
  CHECK(fails_with(fd, RDMA_USER_CM_CMD_CREATE_ID, body, ENODEV, sizeof created));
  CHECK(::close(fd) == 0);
}

// SIGALRM with `flags`, sent to the calling thread every 2 ms while in scope, counted
// (tests/alarm_ticks.h).
std::atomic<int> g_ticks{0};
void count_tick(int) { g_ticks.fetch_add(1, std::memory_order_relaxed); }

class AlarmTicks : public rrdma::test::AlarmTicks {
 public:
  explicit AlarmTicks(int flags) : rrdma::test::AlarmTicks(flags, count_tick) { CHECK(armed()); }
};

// GET_EVENT sleeps in the kernel's write() of the channel (ucma_get_event), which a signal
// ends with EINTR when its handler lacks SA_RESTART and which is restarted under SA_RESTART.
// No event is queued for the first wait; for the second the fake queues one after our NOTIFY,
// sent once 25 ticks reached the sleeping thread. Should a wait not end, the watchdog does.
int run_signals() {
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::fputs("ucma_probe signals: a wait never ended\n", stderr);
    std::_Exit(1);
  }).detach();
  const int fd = ::open(kDevicePath, O_RDWR | O_CLOEXEC);
  CHECK(fd >= 0);
  rdma_ucm_event_resp event{};
  {
    AlarmTicks ticks(0);
    errno = 0;
    CHECK(!get_event(fd, event) && errno == EINTR);
  }
  g_ticks = 0;
  std::thread cue([fd] {
    while (g_ticks.load() < 25) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(succeeds(fd, RDMA_USER_CM_CMD_NOTIFY, rdma_ucm_notify{77, 0}));
  });
  {
    AlarmTicks ticks(SA_RESTART);
    CHECK(get_event(fd, event));
  }
  cue.join();
  CHECK(event.id == 77 && event.event == ucma_probe::kEstablished);
  CHECK(g_ticks.load() >= 25);
  CHECK(::close(fd) == 0);
  std::puts("ucma_probe signals: every check held");
  return 0;
}

int run_raw() {
  check_untouched_calls();
  const int fd = ::open(kDevicePath, O_RDWR | O_CLOEXEC);
  CHECK(fd >= 0);
  CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  const int second = ::openat(AT_FDCWD, kDevicePath, O_RDWR);
  CHECK(second >= 0 && (::fcntl(second, F_GETFD) & FD_CLOEXEC) == 0);
  check_looks_like_the_device(fd);
  check_refused_writes(fd);

  const std::uint32_t id = create_id(fd, kUid);
  CHECK(id == 77);
  set_nonblocking(fd, true);
  rdma_ucm_event_resp event{};
  errno = 0;
  CHECK(!get_event(fd, event) && errno == EAGAIN);
  pollfd watch{fd, POLLIN, 0};
  CHECK(::poll(&watch, 1, 0) == 0);
  set_nonblocking(fd, false);

  CHECK(succeeds(fd, RDMA_USER_CM_CMD_LISTEN, rdma_ucm_listen{id, 3}));  // the fake's cue for events
  check_blocking_event(fd, id);
  const std::uint8_t tos = 0x20;
  rdma_ucm_set_option option{pointer(&tos), id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, 1};
  CHECK(succeeds(fd, RDMA_USER_CM_CMD_SET_OPTION, option));  // the cue for DISCONNECTED
  check_polled_event(fd, id);
  check_event_while_commanding(fd, second);

  check_migrate(second, fd);
  rdma_ucm_bind bind{};
  CHECK(fails_with(fd, RDMA_USER_CM_CMD_BIND, bind, EAFNOSUPPORT));  // the daemon's own refusal
  check_query_route(fd);
  check_dup_and_reuse(fd);
  check_fork(fd);
  CHECK(destroy_id(fd, id) == 3);  // ESTABLISHED, DISCONNECTED, ESTABLISHED

  CHECK(::close(second) == 0 && ::close(fd) == 0);
  check_daemon_death();
  std::puts("ucma_probe raw: every check held");
  return 0;
}

// No daemon answers: open() fails as a missing device would, with the shim's ENODEV.
int run_without_daemon() {
  errno = 0;
  CHECK(::open(kDevicePath, O_RDWR | O_CLOEXEC) == -1 && errno == ENODEV);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (mode == "raw") return run_raw();
  if (mode == "nodaemon") return run_without_daemon();
  if (mode == "signals") return run_signals();
#ifdef RRDMA_HAVE_LIBRDMACM
  if (mode == "librdmacm") return ucma_probe::run_librdmacm();
#endif
  std::fprintf(stderr, "usage: ucma_probe raw|librdmacm|nodaemon|signals\n");
  return 2;
}
