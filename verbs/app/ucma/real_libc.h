// Runs in the application process (the rdma_cm shim, librrdma_ucma.so).
//
// The functions behind the ones the shim interposes: for each, the next definition after ours
// in the process's lookup order (dlsym(RTLD_NEXT)), normally the C library's, or another
// preloaded library's that itself wraps the C library. The shim's own I/O goes through these
// too, so that nothing it does re-enters its interposers.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>

struct ifaddrs;

namespace rrdma::ucma_shim::real {

int open(const char* path, int flags, mode_t mode);
int open64(const char* path, int flags, mode_t mode);
int openat(int dirfd, const char* path, int flags, mode_t mode);
int openat64(int dirfd, const char* path, int flags, mode_t mode);
int open_2(const char* path, int flags);
int open64_2(const char* path, int flags);
int openat_2(int dirfd, const char* path, int flags);
int openat64_2(int dirfd, const char* path, int flags);

int fstat(int fd, struct stat* buf);
int fstat64(int fd, struct stat64* buf);
int fxstat(int version, int fd, struct stat* buf);
int fxstat64(int version, int fd, struct stat64* buf);
int fstatat(int dirfd, const char* path, struct stat* buf, int flags);
int fstatat64(int dirfd, const char* path, struct stat64* buf, int flags);
int statx(int dirfd, const char* path, int flags, unsigned int mask, struct statx* buf);
int stat(const char* path, struct stat* buf);
int stat64(const char* path, struct stat64* buf);
int lstat(const char* path, struct stat* buf);
int lstat64(const char* path, struct stat64* buf);
int xstat(int version, const char* path, struct stat* buf);
int xstat64(int version, const char* path, struct stat64* buf);
int lxstat(int version, const char* path, struct stat* buf);
int lxstat64(int version, const char* path, struct stat64* buf);
int access(const char* path, int mode);
int faccessat(int dirfd, const char* path, int mode, int flags);
int euidaccess(const char* path, int mode);

int getifaddrs(struct ifaddrs** list);
void freeifaddrs(struct ifaddrs* list);

ssize_t write(int fd, const void* buf, std::size_t count);
int close(int fd);
int dup(int fd);
int dup2(int from, int to);
int dup3(int from, int to, int flags);
int socket(int domain, int type, int protocol);

// Looks every function up now, so that the first interposed call made by another library's
// constructor does not run dlsym in the middle of whatever that library is doing.
void resolve_all();

}  // namespace rrdma::ucma_shim::real
