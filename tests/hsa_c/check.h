/* Checks shared by the HSA client programs: one line per check (PASS name / FAIL name: detail),
 * the runtime's start (or its expected failure), and the checks that need no hsa_init. */
#ifndef HSA_C_CHECK_H
#define HSA_C_CHECK_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(name, cond, ...)                                                                     \
  do {                                                                                             \
    if (cond) {                                                                                    \
      printf("PASS %s\n", name);                                                                   \
    } else {                                                                                       \
      printf("FAIL %s: ", name);                                                                   \
      printf(__VA_ARGS__);                                                                         \
      printf("\n");                                                                                \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

#define CHECK_STATUS(name, got, want)                                                              \
  do {                                                                                             \
    hsa_status_t got_ = (got);                                                                     \
    hsa_status_t want_ = (want);                                                                   \
    CHECK(name, got_ == want_, "status %#x, expected %#x", (unsigned)got_, (unsigned)want_);       \
  } while (0)

#define CHECK_OK(name, got) CHECK_STATUS(name, got, HSA_STATUS_SUCCESS)

/* Exits with the verdict: non-zero when any check failed. */
static int finish(void) {
  printf("INFO %d check(s) failed\n", failures);
  fflush(stdout);
  return failures == 0 ? 0 : 1;
}

/* Says which library answers (the one LD_LIBRARY_PATH chose). */
static void report_library(void) {
  Dl_info info;
  if (dladdr((void *)hsa_init, &info) && info.dli_fname)
    printf("INFO library %s\n", info.dli_fname);
}

static hsa_status_t count_agent(hsa_agent_t agent, void *data) {
  (void)agent;
  ++*(int *)data;
  return HSA_STATUS_SUCCESS;
}

/* What every HSA call answers before hsa_init (or after it failed). */
static void checks_without_init(const char *when) {
  char name[128];
  int n = 0;
  hsa_signal_t signal;
  void *ptr = NULL;
  uint64_t ts;
  hsa_amd_memory_pool_t pool = {1};
#define NAMED(what) (snprintf(name, sizeof name, "%s %s", what, when), name)
  CHECK_STATUS(NAMED("hsa_iterate_agents"), hsa_iterate_agents(count_agent, &n),
               HSA_STATUS_ERROR_NOT_INITIALIZED);
  CHECK_STATUS(NAMED("hsa_system_get_info"), hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP, &ts),
               HSA_STATUS_ERROR_NOT_INITIALIZED);
  CHECK_STATUS(NAMED("hsa_signal_create"), hsa_signal_create(1, 0, NULL, &signal),
               HSA_STATUS_ERROR_NOT_INITIALIZED);
  CHECK_STATUS(NAMED("hsa_amd_memory_pool_allocate"),
               hsa_amd_memory_pool_allocate(pool, 4096, 0, &ptr),
               HSA_STATUS_ERROR_NOT_INITIALIZED);
  CHECK_STATUS(NAMED("hsa_shut_down"), hsa_shut_down(), HSA_STATUS_ERROR_NOT_INITIALIZED);
#undef NAMED
}

/* Starts the runtime. HSA_EXPECT_INIT names the status hsa_init should return (default 0);
 * returns whether the runtime is up. When it is expected not to be (a machine without a GPU
 * driver), the calls that need no runtime are checked again after the failed start. */
static int start(void) {
  const char *e = getenv("HSA_EXPECT_INIT");
  hsa_status_t want = e ? (hsa_status_t)strtoul(e, NULL, 0) : HSA_STATUS_SUCCESS;
  report_library();
  checks_without_init("before hsa_init");
  hsa_status_t s = hsa_init();
  CHECK_STATUS("hsa_init", s, want);
  if (s != HSA_STATUS_SUCCESS)
    checks_without_init("after a failed hsa_init");
  return s == HSA_STATUS_SUCCESS;
}

/* Finds the CPU and GPU agents. */
struct agents {
  hsa_agent_t cpu, gpu;
  int cpus, gpus;
};

static hsa_status_t find_agent(hsa_agent_t agent, void *data) {
  struct agents *a = data;
  hsa_device_type_t type;
  if (hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS)
    return HSA_STATUS_ERROR;
  if (type == HSA_DEVICE_TYPE_CPU && a->cpus++ == 0)
    a->cpu = agent;
  if (type == HSA_DEVICE_TYPE_GPU && a->gpus++ == 0)
    a->gpu = agent;
  return HSA_STATUS_SUCCESS;
}

/* A memory pool of an agent with the given segment and global flags (0 flags: any). */
struct pool_query {
  hsa_amd_segment_t segment;
  uint32_t flags;
  hsa_amd_memory_pool_t found;
  int n;
};

static hsa_status_t find_pool(hsa_amd_memory_pool_t pool, void *data) {
  struct pool_query *q = data;
  hsa_amd_segment_t segment;
  uint32_t flags = 0;
  hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment);
  if (segment == HSA_AMD_SEGMENT_GLOBAL)
    hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
  if (segment == q->segment && flags == q->flags && q->n++ == 0)
    q->found = pool;
  return HSA_STATUS_SUCCESS;
}

static hsa_amd_memory_pool_t pool_of(hsa_agent_t agent, hsa_amd_segment_t segment, uint32_t flags,
                                     int *count) {
  struct pool_query q = {segment, flags, {0}, 0};
  hsa_amd_agent_iterate_memory_pools(agent, find_pool, &q);
  if (count)
    *count = q.n;
  return q.found;
}

#endif
