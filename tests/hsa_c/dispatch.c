/* A client's run from code object to results, in the style of ROCr's vector_copy and
 * async_mem_copy samples: a code object read from a file (and, the legacy way, deserialized),
 * kernels that read and write system memory, device memory and locked memory, async copies
 * and fills, a dispatch with a completion signal, profiling timestamps, signals and queue
 * indices. Usage: dispatch CODE_OBJECT_V5 CODE_OBJECT_V4, each holding kernel `scale` with
 * arguments (const uint32_t *in, uint32_t *out) and out[i] = 2 * in[i] + 1 for work-item i. */
#include "check.h"

#include <fcntl.h>
#include <unistd.h>

enum { N = 256, WG = 64 };

struct ctx {
  struct agents a;
  hsa_amd_memory_pool_t kernarg, sys_fine, gpu_coarse, gpu_fine;
  hsa_queue_t *queue;
};

static uint64_t load_kernel(const char *path, const char *what, int legacy) {
  char name[128];
  uint64_t object = 0;
  int fd = open(path, O_RDONLY);
  snprintf(name, sizeof name, "%s: open the code object", what);
  CHECK(name, fd >= 0, "%s", path);
  if (fd < 0)
    return 0;
  struct agents a = {0};
  hsa_iterate_agents(find_agent, &a);
  hsa_executable_t exe;
  hsa_executable_symbol_t sym;
  if (!legacy) {
    hsa_code_object_reader_t reader;
    if (strcmp(what, "v4") == 0) {
      /* From memory, as HIP hands a module's image over. */
      static char bytes[1 << 20];
      ssize_t n = read(fd, bytes, sizeof bytes);
      snprintf(name, sizeof name, "%s: hsa_code_object_reader_create_from_memory", what);
      CHECK_OK(name, hsa_code_object_reader_create_from_memory(bytes, (size_t)(n > 0 ? n : 0),
                                                               &reader));
    } else {
      snprintf(name, sizeof name, "%s: hsa_code_object_reader_create_from_file", what);
      CHECK_OK(name, hsa_code_object_reader_create_from_file(fd, &reader));
    }
    snprintf(name, sizeof name, "%s: hsa_executable_create_alt", what);
    CHECK_OK(name, hsa_executable_create_alt(HSA_PROFILE_BASE,
                                             HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, NULL, &exe));
    snprintf(name, sizeof name, "%s: hsa_executable_load_agent_code_object", what);
    CHECK_OK(name, hsa_executable_load_agent_code_object(exe, a.gpu, reader, NULL, NULL));
    snprintf(name, sizeof name, "%s: hsa_executable_freeze", what);
    CHECK_OK(name, hsa_executable_freeze(exe, NULL));
    snprintf(name, sizeof name, "%s: a kernel is not found without .kd", what);
    CHECK_STATUS(name, hsa_executable_get_symbol_by_name(exe, "scale", &a.gpu, &sym),
                 HSA_STATUS_ERROR_INVALID_SYMBOL_NAME);
    snprintf(name, sizeof name, "%s: hsa_executable_get_symbol_by_name scale.kd", what);
    CHECK_OK(name, hsa_executable_get_symbol_by_name(exe, "scale.kd", &a.gpu, &sym));
    hsa_code_object_reader_destroy(reader);
  } else {
    /* The HSA 1.0 way: the bytes in memory, deserialized. */
    static char bytes[1 << 20];
    ssize_t n = read(fd, bytes, sizeof bytes);
    hsa_code_object_t co;
    snprintf(name, sizeof name, "%s: hsa_code_object_deserialize", what);
    CHECK_OK(name, hsa_code_object_deserialize(bytes, (size_t)(n > 0 ? n : 0), NULL, &co));
    snprintf(name, sizeof name, "%s: hsa_executable_create", what);
    CHECK_OK(name, hsa_executable_create(HSA_PROFILE_BASE, HSA_EXECUTABLE_STATE_UNFROZEN, NULL,
                                         &exe));
    snprintf(name, sizeof name, "%s: hsa_executable_load_code_object", what);
    CHECK_OK(name, hsa_executable_load_code_object(exe, a.gpu, co, NULL));
    snprintf(name, sizeof name, "%s: hsa_executable_freeze", what);
    CHECK_OK(name, hsa_executable_freeze(exe, NULL));
    snprintf(name, sizeof name, "%s: hsa_executable_get_symbol", what);
    CHECK_OK(name, hsa_executable_get_symbol(exe, NULL, "scale.kd", a.gpu, 0, &sym));
    snprintf(name, sizeof name, "%s: hsa_code_object_destroy", what);
    CHECK_OK(name, hsa_code_object_destroy(co));
  }
  close(fd);
  uint32_t kernarg_size = 0;
  snprintf(name, sizeof name, "%s: kernel object", what);
  CHECK_OK(name, hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                                                &object));
  hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                                 &kernarg_size);
  snprintf(name, sizeof name, "%s: 16 bytes of kernel arguments", what);
  CHECK(name, kernarg_size == 16, "%u", kernarg_size);
  return object;
}

/* Publishes a dispatch of `scale` over N work-items (reserving the slot with `reserve`). */
static void submit(struct ctx *c, uint64_t object, const void *in, void *out,
                   hsa_signal_t done, int reserve) {
  void **args = NULL;
  hsa_amd_memory_pool_allocate(c->kernarg, 16, 0, (void **)&args);
  args[0] = (void *)in;
  args[1] = out;
  hsa_queue_t *q = c->queue;
  uint64_t index;
  if (reserve == 0) {
    index = hsa_queue_add_write_index_screlease(q, 1);
  } else {
    /* One producer: read the index, then store the next one. */
    index = hsa_queue_load_write_index_relaxed(q);
    if (reserve == 1)
      hsa_queue_store_write_index_relaxed(q, index + 1);
    else
      hsa_queue_store_write_index_screlease(q, index + 1);
  }
  hsa_kernel_dispatch_packet_t *p = (hsa_kernel_dispatch_packet_t *)q->base_address + index % q->size;
  memset((char *)p + 4, 0, sizeof *p - 4);
  p->workgroup_size_x = WG;
  p->workgroup_size_y = p->workgroup_size_z = 1;
  p->grid_size_x = N;
  p->grid_size_y = p->grid_size_z = 1;
  p->kernel_object = object;
  p->kernarg_address = args;
  p->completion_signal = done;
  uint16_t header = (HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE) |
                    (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE) |
                    (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE);
  uint16_t setup = 1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  __atomic_store_n((uint32_t *)p, header | ((uint32_t)setup << 16), __ATOMIC_RELEASE);
  hsa_signal_store_screlease(q->doorbell_signal, (hsa_signal_value_t)index);
}

/* Dispatches and waits; returns whether the kernel completed. */
static int run(struct ctx *c, uint64_t object, const void *in, void *out, int reserve) {
  hsa_signal_t done;
  hsa_signal_create(1, 0, NULL, &done);
  submit(c, object, in, out, done, reserve);
  hsa_signal_value_t v =
      hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
  hsa_signal_destroy(done);
  return v == 0;
}

static int scaled(const uint32_t *in, const uint32_t *out) {
  for (int i = 0; i < N; i++)
    if (out[i] != 2 * in[i] + 1)
      return 0;
  return 1;
}

static void fill_input(uint32_t *in) {
  for (int i = 0; i < N; i++)
    in[i] = (uint32_t)(i * 7 + 3);
}

static void system_memory(struct ctx *c, uint64_t object) {
  uint32_t *in = NULL, *out = NULL;
  CHECK_OK("system memory: allocate input",
           hsa_amd_memory_pool_allocate(c->sys_fine, N * 4, 0, (void **)&in));
  CHECK_OK("system memory: allocate output",
           hsa_amd_memory_pool_allocate(c->sys_fine, N * 4, 0, (void **)&out));
  CHECK_OK("system memory: allow the gpu", hsa_amd_agents_allow_access(1, &c->a.gpu, NULL, in));
  hsa_amd_agents_allow_access(1, &c->a.gpu, NULL, out);
  fill_input(in);
  memset(out, 0, N * 4);
  /* Profiled: the completion signal carries the dispatch's times. */
  CHECK_OK("hsa_amd_profiling_set_profiler_enabled",
           hsa_amd_profiling_set_profiler_enabled(c->queue, 1));
  hsa_signal_t done;
  hsa_signal_create(1, 0, NULL, &done);
  submit(c, object, in, out, done, 0);
  hsa_signal_value_t v =
      hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
  CHECK("dispatch: the completion signal falls to 0", v == 0, "%ld", (long)v);
  CHECK("system memory: the kernel read and wrote host memory", scaled(in, out),
        "out[0] = %u, out[%d] = %u", out[0], N - 1, out[N - 1]);
  hsa_amd_profiling_dispatch_time_t t = {0, 0};
  uint64_t now = 0;
  CHECK_OK("hsa_amd_profiling_get_dispatch_time",
           hsa_amd_profiling_get_dispatch_time(c->a.gpu, done, &t));
  hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP, &now);
  CHECK("dispatch times are ordered system timestamps", t.start > 0 && t.start <= t.end && t.end <= now,
        "start %lu, end %lu, now %lu", (unsigned long)t.start, (unsigned long)t.end,
        (unsigned long)now);
  hsa_signal_destroy(done);
  hsa_amd_profiling_set_profiler_enabled(c->queue, 0);
  /* The host changes the input between dispatches: the next kernel sees it. */
  in[5] = 1000;
  CHECK("dispatch with a stored write index", run(c, object, in, out, 1), "did not complete");
  CHECK("system memory: a host write between dispatches is seen", out[5] == 2001, "out[5] = %u",
        out[5]);
  in[6] = 2000;
  CHECK("dispatch with a released write index", run(c, object, in, out, 2), "did not complete");
  CHECK("system memory: and again", out[6] == 4001, "out[6] = %u", out[6]);
  CHECK_OK("system memory: free", hsa_amd_memory_pool_free(in));
  hsa_amd_memory_pool_free(out);
}

static void device_memory(struct ctx *c, uint64_t object) {
  uint32_t *host = NULL, *dev_in = NULL, *dev_out = NULL;
  hsa_amd_memory_pool_allocate(c->sys_fine, N * 4, 0, (void **)&host);
  CHECK_OK("device memory: allocate",
           hsa_amd_memory_pool_allocate(c->gpu_coarse, N * 4, 0, (void **)&dev_in));
  hsa_amd_memory_pool_allocate(c->gpu_coarse, N * 4, 0, (void **)&dev_out);
  hsa_amd_agents_allow_access(1, &c->a.gpu, NULL, host);
  fill_input(host);
  hsa_signal_t copied;
  hsa_signal_create(1, 0, NULL, &copied);
  CHECK_OK("hsa_amd_profiling_async_copy_enable", hsa_amd_profiling_async_copy_enable(1));
  CHECK_OK("hsa_amd_memory_async_copy to the device",
           hsa_amd_memory_async_copy(dev_in, c->a.gpu, host, c->a.cpu, N * 4, 0, NULL, copied));
  hsa_signal_wait_scacquire(copied, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
  hsa_amd_profiling_async_copy_time_t ct = {0, 0};
  CHECK_OK("hsa_amd_profiling_get_async_copy_time",
           hsa_amd_profiling_get_async_copy_time(copied, &ct));
  CHECK("async copy times are ordered", ct.start > 0 && ct.start <= ct.end, "start %lu, end %lu",
        (unsigned long)ct.start, (unsigned long)ct.end);
  hsa_amd_profiling_async_copy_enable(0);
  uint32_t check[N];
  CHECK_OK("hsa_memory_copy from the device", hsa_memory_copy(check, dev_in, sizeof check));
  CHECK("hsa_memory_copy reads what the async copy wrote", check[N - 1] == host[N - 1], "%u vs %u",
        check[N - 1], host[N - 1]);
  CHECK_OK("hsa_amd_memory_fill", hsa_amd_memory_fill(dev_out, 0xdeadbeef, N));
  CHECK("dispatch on device memory", run(c, object, dev_in, dev_out, 0), "did not complete");
  /* Back to the host after a dependency: the copy waits for `gate`. */
  hsa_signal_t gate;
  hsa_signal_create(1, 0, NULL, &gate);
  hsa_signal_store_relaxed(copied, 1);
  memset(host, 0, N * 4);
  CHECK_OK("hsa_amd_memory_async_copy after a dependency",
           hsa_amd_memory_async_copy(host, c->a.cpu, dev_out, c->a.gpu, N * 4, 1, &gate, copied));
  hsa_signal_value_t early = hsa_signal_wait_scacquire(copied, HSA_SIGNAL_CONDITION_EQ, 0, 1000000,
                                                       HSA_WAIT_STATE_BLOCKED);
  CHECK("the copy waits for its dependency", early == 1, "completed at %ld", (long)early);
  hsa_signal_subtract_relaxed(gate, 1);
  hsa_signal_wait_scacquire(copied, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
  uint32_t in[N];
  fill_input(in);
  CHECK("device memory: results come back", scaled(in, host), "host[0] = %u", host[0]);
  /* A fill of host-visible memory. */
  CHECK_OK("hsa_amd_memory_fill of system memory", hsa_amd_memory_fill(host, 7, N));
  CHECK("the fill wrote every word", host[0] == 7 && host[N - 1] == 7, "%u %u", host[0], host[N - 1]);
  hsa_amd_pointer_info_t info;
  memset(&info, 0, sizeof info);
  info.size = sizeof info;
  CHECK_OK("hsa_amd_pointer_info of device memory", hsa_amd_pointer_info(dev_in + 3, &info, NULL, NULL, NULL));
  CHECK("device memory is an HSA allocation of the gpu",
        info.type == HSA_EXT_POINTER_TYPE_HSA && info.agentBaseAddress == dev_in &&
            info.sizeInBytes == N * 4 && info.agentOwner.handle == c->a.gpu.handle,
        "type %d, base %p, size %zu", info.type, info.agentBaseAddress, info.sizeInBytes);
  hsa_signal_destroy(gate);
  hsa_signal_destroy(copied);
  hsa_amd_memory_pool_free(dev_in);
  hsa_amd_memory_pool_free(dev_out);
  hsa_amd_memory_pool_free(host);
}

static void locked_memory(struct ctx *c, uint64_t object) {
  uint32_t *in = malloc(N * 4), *out = malloc(N * 4);
  void *agent_in = NULL, *agent_out = NULL;
  fill_input(in);
  memset(out, 0, N * 4);
  CHECK_OK("hsa_amd_memory_lock", hsa_amd_memory_lock(in, N * 4, &c->a.gpu, 1, &agent_in));
  CHECK_OK("hsa_amd_memory_lock_to_pool",
           hsa_amd_memory_lock_to_pool(out, N * 4, &c->a.gpu, 1, c->sys_fine, 0, &agent_out));
  CHECK("dispatch on locked memory", run(c, object, agent_in, agent_out, 0), "did not complete");
  CHECK("locked memory: the kernel's writes reach the application's array", scaled(in, out),
        "out[0] = %u", out[0]);
  hsa_amd_pointer_info_t info;
  memset(&info, 0, sizeof info);
  info.size = sizeof info;
  uint32_t count = 0;
  hsa_agent_t *agents = NULL;
  CHECK_OK("hsa_amd_pointer_info of locked memory",
           hsa_amd_pointer_info(in, &info, malloc, &count, &agents));
  CHECK("locked memory is LOCKED, at both addresses",
        info.type == HSA_EXT_POINTER_TYPE_LOCKED && info.hostBaseAddress == in &&
            info.agentBaseAddress == agent_in && count == 2,
        "type %d, host %p, agent %p, %u agents", info.type, info.hostBaseAddress,
        info.agentBaseAddress, count);
  free(agents);
  CHECK_OK("hsa_amd_memory_unlock", hsa_amd_memory_unlock(in));
  hsa_amd_memory_unlock(out);
  memset(&info, 0, sizeof info);
  info.size = sizeof info;
  hsa_amd_pointer_info(in, &info, NULL, NULL, NULL);
  CHECK("unlocked memory is unknown", info.type == HSA_EXT_POINTER_TYPE_UNKNOWN, "type %d", info.type);
  free(in);
  free(out);
}

static void gpu_fine_memory(struct ctx *c, uint64_t object) {
  uint32_t *in = NULL, *out = NULL;
  CHECK_OK("gpu fine-grained memory: allocate",
           hsa_amd_memory_pool_allocate(c->gpu_fine, N * 4, 0, (void **)&in));
  hsa_amd_memory_pool_allocate(c->gpu_fine, N * 4, 0, (void **)&out);
  CHECK_OK("gpu fine-grained memory: allow the cpu", hsa_amd_agents_allow_access(1, &c->a.cpu, NULL, in));
  hsa_amd_agents_allow_access(1, &c->a.cpu, NULL, out);
  fill_input(in);
  CHECK("dispatch on gpu fine-grained memory", run(c, object, in, out, 0), "did not complete");
  CHECK("gpu fine-grained memory: the host reads the results", scaled(in, out), "out[0] = %u", out[0]);
  hsa_amd_memory_pool_free(in);
  hsa_amd_memory_pool_free(out);
}

typedef void (*signal_op)(hsa_signal_t, hsa_signal_value_t);
typedef hsa_signal_value_t (*signal_swap)(hsa_signal_t, hsa_signal_value_t);
typedef hsa_signal_value_t (*signal_cas)(hsa_signal_t, hsa_signal_value_t, hsa_signal_value_t);
typedef uint64_t (*queue_add)(const hsa_queue_t *, uint64_t);
typedef uint64_t (*queue_cas)(const hsa_queue_t *, uint64_t, uint64_t);
typedef uint64_t (*queue_load)(const hsa_queue_t *);

/* Every memory-order variant of the signal and queue-index operations, each applied once. */
static void memory_order_variants(void) {
  struct {
    const char *name;
    signal_op op;
    hsa_signal_value_t start, operand, want;
  } ops[] = {
      {"hsa_signal_add_scacq_screl", hsa_signal_add_scacq_screl, 1, 2, 3},
      {"hsa_signal_add_scacquire", hsa_signal_add_scacquire, 1, 2, 3},
      {"hsa_signal_add_screlease", hsa_signal_add_screlease, 1, 2, 3},
      {"hsa_signal_add_acq_rel", hsa_signal_add_acq_rel, 1, 2, 3},
      {"hsa_signal_add_acquire", hsa_signal_add_acquire, 1, 2, 3},
      {"hsa_signal_add_release", hsa_signal_add_release, 1, 2, 3},
      {"hsa_signal_subtract_scacq_screl", hsa_signal_subtract_scacq_screl, 5, 2, 3},
      {"hsa_signal_subtract_scacquire", hsa_signal_subtract_scacquire, 5, 2, 3},
      {"hsa_signal_subtract_screlease", hsa_signal_subtract_screlease, 5, 2, 3},
      {"hsa_signal_subtract_acq_rel", hsa_signal_subtract_acq_rel, 5, 2, 3},
      {"hsa_signal_subtract_acquire", hsa_signal_subtract_acquire, 5, 2, 3},
      {"hsa_signal_subtract_release", hsa_signal_subtract_release, 5, 2, 3},
      {"hsa_signal_and_scacq_screl", hsa_signal_and_scacq_screl, 6, 3, 2},
      {"hsa_signal_and_scacquire", hsa_signal_and_scacquire, 6, 3, 2},
      {"hsa_signal_and_screlease", hsa_signal_and_screlease, 6, 3, 2},
      {"hsa_signal_or_relaxed", hsa_signal_or_relaxed, 4, 1, 5},
      {"hsa_signal_or_scacquire", hsa_signal_or_scacquire, 4, 1, 5},
      {"hsa_signal_or_screlease", hsa_signal_or_screlease, 4, 1, 5},
      {"hsa_signal_xor_relaxed", hsa_signal_xor_relaxed, 6, 3, 5},
      {"hsa_signal_xor_scacq_screl", hsa_signal_xor_scacq_screl, 6, 3, 5},
      {"hsa_signal_xor_scacquire", hsa_signal_xor_scacquire, 6, 3, 5},
      {"hsa_signal_silent_store_screlease", hsa_signal_silent_store_screlease, 0, 7, 7},
      {"hsa_signal_store_release", hsa_signal_store_release, 0, 7, 7},
  };
  struct {
    const char *name;
    signal_swap op;
  } swaps[] = {
      {"hsa_signal_exchange_relaxed", hsa_signal_exchange_relaxed},
      {"hsa_signal_exchange_scacquire", hsa_signal_exchange_scacquire},
      {"hsa_signal_exchange_screlease", hsa_signal_exchange_screlease},
      {"hsa_signal_exchange_acq_rel", hsa_signal_exchange_acq_rel},
      {"hsa_signal_exchange_acquire", hsa_signal_exchange_acquire},
      {"hsa_signal_exchange_release", hsa_signal_exchange_release},
  };
  struct {
    const char *name;
    signal_cas op;
  } cases[] = {
      {"hsa_signal_cas_relaxed", hsa_signal_cas_relaxed},
      {"hsa_signal_cas_scacquire", hsa_signal_cas_scacquire},
      {"hsa_signal_cas_screlease", hsa_signal_cas_screlease},
      {"hsa_signal_cas_acq_rel", hsa_signal_cas_acq_rel},
      {"hsa_signal_cas_acquire", hsa_signal_cas_acquire},
      {"hsa_signal_cas_release", hsa_signal_cas_release},
  };
  hsa_signal_t s;
  hsa_signal_create(0, 0, NULL, &s);
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    hsa_signal_store_relaxed(s, ops[i].start);
    ops[i].op(s, ops[i].operand);
    hsa_signal_value_t v = hsa_signal_load_acquire(s);
    CHECK(ops[i].name, v == ops[i].want, "%ld", (long)v);
  }
  for (size_t i = 0; i < sizeof swaps / sizeof swaps[0]; i++) {
    hsa_signal_store_relaxed(s, 11);
    hsa_signal_value_t old = swaps[i].op(s, 12);
    CHECK(swaps[i].name, old == 11 && hsa_signal_load_relaxed(s) == 12, "old %ld", (long)old);
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hsa_signal_store_relaxed(s, 21);
    hsa_signal_value_t old = cases[i].op(s, 21, 22);
    CHECK(cases[i].name, old == 21 && hsa_signal_load_relaxed(s) == 22, "old %ld", (long)old);
  }
  hsa_signal_store_relaxed(s, 3);
  CHECK("hsa_signal_wait_relaxed", hsa_signal_wait_relaxed(s, HSA_SIGNAL_CONDITION_GTE, 3, UINT64_MAX,
                                                           HSA_WAIT_STATE_ACTIVE) == 3,
        "wrong value");
  hsa_signal_destroy(s);

  /* Queue indices, on a queue of their own (no packets are published). */
  struct agents a = {0};
  hsa_iterate_agents(find_agent, &a);
  hsa_queue_t *q = NULL;
  hsa_queue_create(a.gpu, 64, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX, &q);
  struct {
    const char *name;
    queue_add op;
  } adds[] = {
      {"hsa_queue_add_write_index_scacq_screl", hsa_queue_add_write_index_scacq_screl},
      {"hsa_queue_add_write_index_scacquire", hsa_queue_add_write_index_scacquire},
      {"hsa_queue_add_write_index_relaxed", hsa_queue_add_write_index_relaxed},
      {"hsa_queue_add_write_index_acq_rel", hsa_queue_add_write_index_acq_rel},
      {"hsa_queue_add_write_index_acquire", hsa_queue_add_write_index_acquire},
      {"hsa_queue_add_write_index_release", hsa_queue_add_write_index_release},
  };
  struct {
    const char *name;
    queue_cas op;
  } swaps_q[] = {
      {"hsa_queue_cas_write_index_scacquire", hsa_queue_cas_write_index_scacquire},
      {"hsa_queue_cas_write_index_screlease", hsa_queue_cas_write_index_screlease},
      {"hsa_queue_cas_write_index_acq_rel", hsa_queue_cas_write_index_acq_rel},
      {"hsa_queue_cas_write_index_acquire", hsa_queue_cas_write_index_acquire},
      {"hsa_queue_cas_write_index_release", hsa_queue_cas_write_index_release},
  };
  struct {
    const char *name;
    queue_load op;
  } loads[] = {
      {"hsa_queue_load_write_index_acquire", hsa_queue_load_write_index_acquire},
      {"hsa_queue_load_read_index_scacquire", hsa_queue_load_read_index_scacquire},
      {"hsa_queue_load_read_index_relaxed", hsa_queue_load_read_index_relaxed},
      {"hsa_queue_load_read_index_acquire", hsa_queue_load_read_index_acquire},
  };
  uint64_t index = 0;
  for (size_t i = 0; i < sizeof adds / sizeof adds[0]; i++, index += 2) {
    uint64_t old = adds[i].op(q, 2);
    CHECK(adds[i].name, old == index, "%lu, expected %lu", (unsigned long)old, (unsigned long)index);
  }
  for (size_t i = 0; i < sizeof swaps_q / sizeof swaps_q[0]; i++, index++) {
    uint64_t old = swaps_q[i].op(q, index, index + 1);
    CHECK(swaps_q[i].name, old == index, "%lu", (unsigned long)old);
  }
  hsa_queue_store_write_index_release(q, 40);
  CHECK("hsa_queue_store_write_index_release", loads[0].op(q) == 40, "%lu",
        (unsigned long)loads[0].op(q));
  for (size_t i = 1; i < sizeof loads / sizeof loads[0]; i++)
    CHECK(loads[i].name, loads[i].op(q) == 0, "read index %lu", (unsigned long)loads[i].op(q));
  /* Publish nothing past the read index: put the write index back before destroying. */
  hsa_queue_store_write_index_relaxed(q, 0);
  hsa_queue_destroy(q);
}

static int handled;

static bool on_signal(hsa_signal_value_t value, void *arg) {
  (void)value;
  __atomic_store_n((int *)arg, 1, __ATOMIC_SEQ_CST);
  return false;
}

static void signal_checks(void) {
  hsa_signal_t s;
  CHECK_OK("hsa_amd_signal_create", hsa_amd_signal_create(10, 0, NULL, 0, &s));
  hsa_signal_add_relaxed(s, 5);
  hsa_signal_subtract_relaxed(s, 3);
  CHECK("hsa_signal_add_relaxed and _subtract_relaxed", hsa_signal_load_relaxed(s) == 12, "%ld",
        (long)hsa_signal_load_relaxed(s));
  hsa_signal_silent_store_relaxed(s, 4);
  CHECK("hsa_signal_silent_store_relaxed", hsa_signal_load_scacquire(s) == 4, "%ld",
        (long)hsa_signal_load_scacquire(s));
  CHECK("hsa_signal_exchange_scacq_screl returns the old value",
        hsa_signal_exchange_scacq_screl(s, 9) == 4 && hsa_signal_load_relaxed(s) == 9, "wrong");
  CHECK("hsa_signal_cas_scacq_screl", hsa_signal_cas_scacq_screl(s, 9, 2) == 9 &&
                                         hsa_signal_load_relaxed(s) == 2, "wrong");
  volatile hsa_signal_value_t *value = NULL;
  CHECK_OK("hsa_amd_signal_value_pointer", hsa_amd_signal_value_pointer(s, &value));
  CHECK("the value pointer holds the value", value && *value == 2, "wrong");
  hsa_signal_value_t v = hsa_signal_wait_acquire(s, HSA_SIGNAL_CONDITION_EQ, 0, 1000000,
                                                 HSA_WAIT_STATE_BLOCKED);
  CHECK("hsa_signal_wait_acquire times out with the value", v == 2, "%ld", (long)v);
  CHECK_OK("hsa_amd_signal_async_handler",
           hsa_amd_signal_async_handler(s, HSA_SIGNAL_CONDITION_LT, 1, on_signal, &handled));
  hsa_signal_store_screlease(s, 0);
  for (int i = 0; i < 500 && !__atomic_load_n(&handled, __ATOMIC_SEQ_CST); i++)
    usleep(10000);
  CHECK("the async handler runs when the condition holds", handled, "not called in 5 s");
  CHECK_OK("hsa_signal_destroy", hsa_signal_destroy(s));
  memory_order_variants();
}

/* The rest of the surface: rectangular copies, coherency, registration, legacy queries,
 * global variables, memory assignment, signal bit operations and write-index swaps. */
static void surface_checks(struct ctx *c, uint64_t object) {
  (void)object;
  enum { W = 16, H = 4 };
  uint32_t *host = NULL, *dev = NULL;
  hsa_amd_memory_pool_allocate(c->sys_fine, W * H * 4, 0, (void **)&host);
  hsa_amd_memory_pool_allocate(c->gpu_coarse, W * H * 4, 0, (void **)&dev);
  for (int i = 0; i < W * H; i++)
    host[i] = (uint32_t)i;
  hsa_pitched_ptr_t src = {host, W * 4, W * H * 4}, dst = {dev, W * 4, W * H * 4};
  hsa_dim3_t origin = {0, 0, 0}, range = {W * 4, H, 1};
  hsa_signal_t done;
  hsa_signal_create(1, 0, NULL, &done);
  CHECK_OK("hsa_amd_memory_async_copy_rect to the device",
           hsa_amd_memory_async_copy_rect(&dst, &origin, &src, &origin, &range, c->a.gpu,
                                          hsaHostToDevice, 0, NULL, done));
  hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
  /* Back: the middle two rows, columns 4..11, into a zeroed host buffer. */
  memset(host, 0, W * H * 4);
  hsa_dim3_t at = {4 * 4, 1, 0}, part = {8 * 4, 2, 1};
  hsa_signal_store_relaxed(done, 1);
  hsa_pitched_ptr_t back_src = {dev, W * 4, W * H * 4}, back_dst = {host, W * 4, W * H * 4};
  CHECK_OK("hsa_amd_memory_async_copy_rect of a sub-rectangle",
           hsa_amd_memory_async_copy_rect(&back_dst, &at, &back_src, &at, &part, c->a.gpu,
                                          hsaDeviceToHost, 0, NULL, done));
  hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
  CHECK("the sub-rectangle and nothing else came back",
        host[1 * W + 4] == 1 * W + 4 && host[2 * W + 11] == 2 * W + 11 && host[1 * W + 3] == 0 &&
            host[3 * W + 4] == 0 && host[0] == 0,
        "%u %u %u %u", host[1 * W + 4], host[2 * W + 11], host[1 * W + 3], host[3 * W + 4]);
  hsa_signal_destroy(done);
  CHECK_OK("hsa_amd_coherency_set_type",
           hsa_amd_coherency_set_type(c->a.gpu, HSA_AMD_COHERENCY_TYPE_COHERENT));
  static char plain[4096];
  CHECK_OK("hsa_memory_register", hsa_memory_register(plain, sizeof plain));
  CHECK_OK("hsa_memory_deregister", hsa_memory_deregister(plain, sizeof plain));
  CHECK_OK("hsa_memory_assign_agent", hsa_memory_assign_agent(host, c->a.gpu, HSA_ACCESS_PERMISSION_RW));
  hsa_isa_t isa;
  uint32_t wave = 0;
  hsa_agent_get_info(c->a.gpu, HSA_AGENT_INFO_ISA, &isa);
  CHECK_OK("hsa_isa_get_info (deprecated)",
           hsa_isa_get_info(isa, HSA_ISA_INFO_CALL_CONVENTION_INFO_WAVEFRONT_SIZE, 0, &wave));
  CHECK("the call convention's wavefront is 64", wave == 64, "%u", wave);
  hsa_amd_memory_pool_link_info_t link;
  memset(&link, 0xff, sizeof link);
  CHECK_OK("LINK_INFO of system memory from the gpu",
           hsa_amd_agent_memory_pool_get_info(c->a.gpu, c->sys_fine,
                                              HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO, &link));
  CHECK("the link is PCIe with atomics", link.link_type == HSA_AMD_LINK_INFO_TYPE_PCIE &&
                                             link.atomic_support_64bit,
        "type %d", link.link_type);
  hsa_executable_t exe;
  hsa_executable_create_alt(HSA_PROFILE_BASE, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, NULL, &exe);
  CHECK_STATUS("defining a global no code object declares",
               hsa_executable_agent_global_variable_define(exe, c->a.gpu, "missing", plain),
               HSA_STATUS_ERROR_INVALID_SYMBOL_NAME);
  hsa_executable_destroy(exe);
  hsa_signal_t s;
  hsa_signal_create(0xf0, 0, NULL, &s);
  hsa_signal_and_relaxed(s, 0x3c);
  hsa_signal_or_scacq_screl(s, 0x1);
  hsa_signal_xor_screlease(s, 0xff);
  CHECK("hsa_signal_and, _or and _xor", hsa_signal_load_relaxed(s) == (((0xf0 & 0x3c) | 1) ^ 0xff),
        "%#lx", (long)hsa_signal_load_relaxed(s));
  hsa_signal_destroy(s);
  uint64_t w = hsa_queue_load_write_index_scacquire(c->queue);
  CHECK("hsa_queue_cas_write_index_scacq_screl swaps an expected index",
        hsa_queue_cas_write_index_scacq_screl(c->queue, w, w) == w, "index moved");
  CHECK("and refuses an unexpected one", hsa_queue_cas_write_index_relaxed(c->queue, w + 5, w + 9) == w,
        "swapped");
  bool b = true;
  uint16_t minor = 0;
  CHECK_OK("hsa_system_major_extension_supported",
           hsa_system_major_extension_supported(HSA_EXTENSION_AMD_PROFILER, 1, &minor, &b));
  CHECK("no major extension is offered", !b, "supported");
  hsa_amd_memory_pool_free(host);
  hsa_amd_memory_pool_free(dev);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s CODE_OBJECT_V5 CODE_OBJECT_V4\n", argv[0]);
    return 2;
  }
  if (!start())
    return finish();
  struct ctx c;
  memset(&c, 0, sizeof c);
  hsa_iterate_agents(find_agent, &c.a);
  CHECK("a gpu", c.a.gpus == 1, "%d", c.a.gpus);
  int n = 0;
  c.kernarg = pool_of(c.a.cpu, HSA_AMD_SEGMENT_GLOBAL,
                      HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT |
                          HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
                      &n);
  CHECK("a kernarg pool", n == 1, "%d", n);
  c.sys_fine = pool_of(c.a.cpu, HSA_AMD_SEGMENT_GLOBAL, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, &n);
  CHECK("a system fine-grained pool", n == 1, "%d", n);
  c.gpu_coarse = pool_of(c.a.gpu, HSA_AMD_SEGMENT_GLOBAL, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, &n);
  CHECK("a gpu coarse-grained pool", n == 1, "%d", n);
  c.gpu_fine = pool_of(c.a.gpu, HSA_AMD_SEGMENT_GLOBAL, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, &n);
  CHECK("a gpu fine-grained pool", n == 1, "%d", n);
  CHECK_OK("hsa_queue_create", hsa_queue_create(c.a.gpu, 64, HSA_QUEUE_TYPE_MULTI, NULL, NULL,
                                                UINT32_MAX, UINT32_MAX, &c.queue));
  uint32_t mask[8];
  memset(mask, 0xff, sizeof mask);
  CHECK_OK("hsa_amd_queue_cu_set_mask", hsa_amd_queue_cu_set_mask(c.queue, 256, mask));
  CHECK_OK("hsa_amd_queue_set_priority", hsa_amd_queue_set_priority(c.queue, HSA_AMD_QUEUE_PRIORITY_HIGH));
  uint64_t v5 = load_kernel(argv[1], "v5", 0);
  uint64_t legacy = load_kernel(argv[1], "legacy", 1);
  uint64_t v4 = load_kernel(argv[2], "v4", 0);
  system_memory(&c, v5);
  device_memory(&c, v5);
  locked_memory(&c, v5);
  gpu_fine_memory(&c, v5);
  uint32_t *in = NULL, *out = NULL;
  hsa_amd_memory_pool_allocate(c.sys_fine, N * 4, 0, (void **)&in);
  hsa_amd_memory_pool_allocate(c.sys_fine, N * 4, 0, (void **)&out);
  fill_input(in);
  CHECK("the legacy executable's kernel runs", legacy && run(&c, legacy, in, out, 0) && scaled(in, out),
        "wrong results");
  memset(out, 0, N * 4);
  CHECK("the code object v4 kernel runs", v4 && run(&c, v4, in, out, 0) && scaled(in, out),
        "wrong results");
  signal_checks();
  surface_checks(&c, v5);
  CHECK_OK("hsa_queue_destroy", hsa_queue_destroy(c.queue));
  CHECK_OK("hsa_shut_down", hsa_shut_down());
  return finish();
}
