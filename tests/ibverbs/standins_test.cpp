// The stand-in libmlx5.so.1 / libefa.so.1 (verbs/app/ibverbs/standins/, docs/IBVERBS.md):
// each function reports "not supported" the way its man page reports failure. One or two
// functions per convention of standins/conventions.txt, and both versions of mlx5dv_init_obj.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <infiniband/efadv.h>
#include <infiniband/mlx5dv.h>

#include <cerrno>

TEST_CASE("stand-in pointer-returning functions give NULL with errno EOPNOTSUPP", "[standins]") {
  errno = 0;
  CHECK(mlx5dv_open_device(nullptr, nullptr) == nullptr);  // mlx5dv_open_device(3)
  CHECK(errno == EOPNOTSUPP);
  errno = 0;
  CHECK(mlx5dv_devx_create_event_channel(nullptr, MLX5DV_DEVX_CREATE_EVENT_CHANNEL_FLAGS_OMIT_EV_DATA) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  errno = 0;
  CHECK(mlx5dv_get_vfio_device_list(nullptr) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  errno = 0;
  CHECK(efadv_create_cq(nullptr, nullptr, nullptr, 0) == nullptr);  // efadv_create_cq(3)
  CHECK(errno == EOPNOTSUPP);
}

TEST_CASE("stand-in int-returning functions return the errno value EOPNOTSUPP", "[standins]") {
  CHECK(mlx5dv_query_device(nullptr, nullptr) == EOPNOTSUPP);  // "the value of errno"
  CHECK(mlx5dv_devx_general_cmd(nullptr, nullptr, 0, nullptr, 0) == EOPNOTSUPP);
  mlx5dv_port port{};
  CHECK(mlx5dv_query_port(nullptr, 1, &port) == EOPNOTSUPP);  // inline, calls _mlx5dv_query_port
  CHECK(efadv_query_device(nullptr, nullptr, 0) == EOPNOTSUPP);
  CHECK(efadv_query_ah(nullptr, nullptr, 0) == EOPNOTSUPP);
}

TEST_CASE("stand-in functions with their own man page conventions", "[standins]") {
  CHECK_FALSE(mlx5dv_is_supported(nullptr));  // mlx5dv_is_supported(3): a bool
  errno = 0;
  CHECK(mlx5dv_devx_get_event(nullptr, nullptr, 0) == -1);  // mlx5dv_devx_get_event(3)
  CHECK(errno == EOPNOTSUPP);
  CHECK(mlx5dv_qp_cancel_posted_send_wrs(nullptr, 0) == -EOPNOTSUPP);  // "-errno on error"
  errno = 0;
  CHECK(mlx5dv_vfio_get_events_fd(nullptr) == -1);
  CHECK(errno == EOPNOTSUPP);
  mlx5dv_devx_free_uar(nullptr);  // void: nothing to report, nothing touched
  mlx5dv_free_var(nullptr);
}

TEST_CASE("both versions of mlx5dv_init_obj are there and say not supported", "[standins]") {
  using InitObj = int (*)(struct mlx5dv_obj*, uint64_t);
  for (const char* version : {"MLX5_1.0", "MLX5_1.2"}) {
    INFO(version);
    auto init_obj = reinterpret_cast<InitObj>(dlvsym(RTLD_DEFAULT, "mlx5dv_init_obj", version));
    REQUIRE(init_obj != nullptr);
    CHECK(init_obj(nullptr, 0) == EOPNOTSUPP);
  }
}
