/* A stand-in libmlx5.so.1 (docs/IBVERBS.md). perftest links Mellanox's direct-verbs library
 * and imports these symbols whatever the device; with rdma-core's libibverbs replaced by ours
 * the real libmlx5 could not load (it imports IBVERBS_PRIVATE_34 provider calls). Every
 * function says "not supported" the way its man page reports errors, so perftest takes its
 * generic verbs path. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#include <infiniband/mlx5dv.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT bool mlx5dv_is_supported(struct ibv_device *device) {
  (void)device;
  return false;
}

EXPORT int mlx5dv_query_device(struct ibv_context *context, struct mlx5dv_context *attrs) {
  (void)context;
  (void)attrs;
  return EOPNOTSUPP;
}

EXPORT struct ibv_context *mlx5dv_open_device(struct ibv_device *device,
                                              struct mlx5dv_context_attr *attr) {
  (void)device;
  (void)attr;
  errno = EOPNOTSUPP;
  return NULL;
}

EXPORT struct ibv_qp *mlx5dv_create_qp(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr,
                                       struct mlx5dv_qp_init_attr *mlx5_attr) {
  (void)context;
  (void)attr;
  (void)mlx5_attr;
  errno = EOPNOTSUPP;
  return NULL;
}

EXPORT struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qp) {
  (void)qp;
  errno = EOPNOTSUPP;
  return NULL;
}

EXPORT int mlx5dv_devx_general_cmd(struct ibv_context *context, const void *in, size_t inlen,
                                   void *out, size_t outlen) {
  (void)context;
  (void)in;
  (void)inlen;
  (void)out;
  (void)outlen;
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

EXPORT struct mlx5dv_mkey *mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *attr) {
  (void)attr;
  errno = EOPNOTSUPP;
  return NULL;
}

EXPORT int mlx5dv_destroy_mkey(struct mlx5dv_mkey *mkey) {
  (void)mkey;
  return EOPNOTSUPP;
}

EXPORT int mlx5dv_crypto_login(struct ibv_context *context, struct mlx5dv_crypto_login_attr *attr) {
  (void)context;
  (void)attr;
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

EXPORT struct mlx5dv_dek *mlx5dv_dek_create(struct ibv_context *context,
                                            struct mlx5dv_dek_init_attr *attr) {
  (void)context;
  (void)attr;
  errno = EOPNOTSUPP;
  return NULL;
}

EXPORT int mlx5dv_dek_destroy(struct mlx5dv_dek *dek) {
  (void)dek;
  return EOPNOTSUPP;
}
