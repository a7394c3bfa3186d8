/* A stand-in libefa.so.1 (docs/IBVERBS.md): perftest imports these two Elastic Fabric Adapter
 * calls whatever the device. Both report "not supported" as efadv(7) says errors are
 * reported, so perftest uses the generic verbs. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/efadv.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT int efadv_query_device(struct ibv_context *context, struct efadv_device_attr *attr,
                              uint32_t inlen) {
  (void)context;
  (void)attr;
  (void)inlen;
  return EOPNOTSUPP;
}

EXPORT struct ibv_qp *efadv_create_qp_ex(struct ibv_context *context,
                                         struct ibv_qp_init_attr_ex *attr,
                                         struct efadv_qp_init_attr *efa_attr, uint32_t inlen) {
  (void)context;
  (void)attr;
  (void)efa_attr;
  (void)inlen;
  errno = EOPNOTSUPP;
  return NULL;
}
