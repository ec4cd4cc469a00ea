/* Agent, pool, region and ISA discovery as rocminfo and ROCr's samples do it, and the
 * attributes they read. Attributes newer than ROCm 5.2's headers are named by their values in
 * today's hsa.h / hsa_ext_amd.h. */
#include "check.h"

enum {
  SYS_MWAITX_ENABLED = 0x203, /* HSA_AMD_SYSTEM_INFO_MWAITX_ENABLED */
  SYS_DMABUF_SUPPORTED = 0x204,
  SYS_VIRTUAL_MEM_API_SUPPORTED = 0x205,
  SYS_XNACK_ENABLED = 0x206,
  SYS_EXT_VERSION_MAJOR = 0x207,
  SYS_EXT_VERSION_MINOR = 0x208,
  AGENT_UCODE_VERSION = 0xA108, /* HSA_AMD_AGENT_INFO_UCODE_VERSION */
  AGENT_SDMA_UCODE_VERSION = 0xA109,
  AGENT_IOMMU_SUPPORT = 0xA110,
  AGENT_NUM_XCC = 0xA111,
  AGENT_MEMORY_PROPERTIES = 0xA114,
  AGENT_TIMESTAMP_FREQUENCY = 0xA016, /* HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY */
  AGENT_NEAREST_CPU = 0xA113,
  POOL_LOCATION = 17, /* HSA_AMD_MEMORY_POOL_INFO_LOCATION */
  POOL_REC_GRANULE = 18, /* HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_REC_GRANULE */
};

static const char ISA_NAME[] = "amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-";

static void system_checks(void) {
  uint16_t major = 0, minor = 0;
  bool b = true;
  uint64_t t0 = 0, t1 = 0, freq = 0;
  CHECK_OK("system version major", hsa_system_get_info(HSA_SYSTEM_INFO_VERSION_MAJOR, &major));
  CHECK("system version is 1.x", major == 1, "major %u", major);
  CHECK_OK("system EXT_VERSION_MAJOR", hsa_system_get_info(SYS_EXT_VERSION_MAJOR, &major));
  CHECK("hsa_ext_amd interface major is 1", major == 1, "major %u", major);
  CHECK_OK("system EXT_VERSION_MINOR", hsa_system_get_info(SYS_EXT_VERSION_MINOR, &minor));
  const int flags[] = {SYS_MWAITX_ENABLED, SYS_DMABUF_SUPPORTED, SYS_VIRTUAL_MEM_API_SUPPORTED,
                       SYS_XNACK_ENABLED, HSA_AMD_SYSTEM_INFO_SVM_SUPPORTED};
  const char *names[] = {"MWAITX_ENABLED", "DMABUF_SUPPORTED", "VIRTUAL_MEM_API_SUPPORTED",
                         "XNACK_ENABLED", "SVM_SUPPORTED"};
  for (int i = 0; i < 5; i++) {
    char name[64];
    snprintf(name, sizeof name, "system %s is false", names[i]);
    b = true;
    hsa_status_t s = hsa_system_get_info((hsa_system_info_t)flags[i], &b);
    CHECK(name, s == HSA_STATUS_SUCCESS && !b, "status %#x, value %d", (unsigned)s, b);
  }
  CHECK_OK("system timestamp frequency",
           hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &freq));
  hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP, &t0);
  hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP, &t1);
  CHECK("system timestamps move forward", freq > 0 && t1 >= t0, "%lu then %lu at %lu Hz",
        (unsigned long)t0, (unsigned long)t1, (unsigned long)freq);
}

static void cpu_checks(hsa_agent_t cpu) {
  char vendor[64] = {0};
  hsa_profile_t profile = HSA_PROFILE_BASE;
  hsa_default_float_rounding_mode_t mode = 0;
  hsa_isa_t isa = {7};
  CHECK_OK("cpu vendor", hsa_agent_get_info(cpu, HSA_AGENT_INFO_VENDOR_NAME, vendor));
  CHECK("cpu vendor is CPU", strcmp(vendor, "CPU") == 0, "`%s`", vendor);
  CHECK_OK("cpu profile", hsa_agent_get_info(cpu, HSA_AGENT_INFO_PROFILE, &profile));
  CHECK("cpu profile is FULL", profile == HSA_PROFILE_FULL, "%d", profile);
  CHECK_OK("cpu float rounding",
           hsa_agent_get_info(cpu, HSA_AGENT_INFO_DEFAULT_FLOAT_ROUNDING_MODE, &mode));
  CHECK("cpu float rounding is NEAR", mode == HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR, "%d", mode);
  char cpu_name[64] = {0};
  uint32_t mhz = 0;
  CHECK_OK("cpu name", hsa_agent_get_info(cpu, HSA_AGENT_INFO_NAME, cpu_name));
  CHECK("cpu is named", cpu_name[0] != 0, "empty");
  CHECK_OK("cpu MAX_CLOCK_FREQUENCY",
           hsa_agent_get_info(cpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY, &mhz));
  CHECK_OK("cpu isa", hsa_agent_get_info(cpu, HSA_AGENT_INFO_ISA, &isa));
  CHECK("cpu has no isa", isa.handle == 0, "%#lx", (unsigned long)isa.handle);
}

static hsa_status_t note_isa(hsa_isa_t isa, void *data) {
  *(hsa_isa_t *)data = isa;
  return HSA_STATUS_SUCCESS;
}

static void gpu_checks(hsa_agent_t gpu) {
  char name[64] = {0}, uuid[21] = {0};
  uint32_t u = 0, caches[4] = {0};
  bool b = true;
  uint8_t props[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  hsa_profile_t profile = HSA_PROFILE_FULL;
  hsa_default_float_rounding_mode_t mode = 0;
  CHECK_OK("gpu name", hsa_agent_get_info(gpu, HSA_AGENT_INFO_NAME, name));
  CHECK("gpu name is gfx950", strcmp(name, "gfx950") == 0, "`%s`", name);
  CHECK_OK("gpu profile", hsa_agent_get_info(gpu, HSA_AGENT_INFO_PROFILE, &profile));
  CHECK("gpu profile is BASE", profile == HSA_PROFILE_BASE, "%d", profile);
  CHECK_OK("gpu DEFAULT_FLOAT_ROUNDING_MODE",
           hsa_agent_get_info(gpu, HSA_AGENT_INFO_DEFAULT_FLOAT_ROUNDING_MODE, &mode));
  CHECK("gpu float rounding is NEAR", mode == HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR, "%d", mode);
  CHECK_OK("gpu FBARRIER_MAX_SIZE", hsa_agent_get_info(gpu, HSA_AGENT_INFO_FBARRIER_MAX_SIZE, &u));
  CHECK("gpu has 32 fbarriers", u == 32, "%u", u);
  CHECK_OK("gpu CACHE_SIZE", hsa_agent_get_info(gpu, HSA_AGENT_INFO_CACHE_SIZE, caches));
  CHECK("gpu L2 is 4 MiB", caches[1] == 4u << 20, "%u", caches[1]);
  CHECK_OK("gpu FAST_F16_OPERATION", hsa_agent_get_info(gpu, HSA_AGENT_INFO_FAST_F16_OPERATION, &b));
  CHECK("gpu has fast f16", b, "false");
  CHECK_OK("gpu CHIP_ID", hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_CHIP_ID, &u));
  CHECK("gpu chip is an MI355X", u == 0x75a3, "%#x", u);
  CHECK_OK("gpu DRIVER_NODE_ID",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_DRIVER_NODE_ID, &u));
  CHECK_OK("gpu MAX_ADDRESS_WATCH_POINTS",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_MAX_ADDRESS_WATCH_POINTS,
                              &u));
  CHECK("gpu has 4 watch points", u == 4, "%u", u);
  CHECK_OK("gpu BDFID", hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_BDFID, &u));
  CHECK_OK("gpu NUM_SHADER_ENGINES",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_NUM_SHADER_ENGINES, &u));
  CHECK("gpu has 32 shader engines", u == 32, "%u", u);
  CHECK_OK("gpu NUM_SHADER_ARRAYS_PER_SE",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_NUM_SHADER_ARRAYS_PER_SE,
                              &u));
  CHECK_OK("gpu UUID", hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_UUID, uuid));
  CHECK("gpu UUID starts GPU-", strncmp(uuid, "GPU-", 4) == 0, "`%s`", uuid);
  CHECK_OK("gpu ASIC_REVISION",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_ASIC_REVISION, &u));
  b = true;
  CHECK_OK("gpu SVM_DIRECT_HOST_ACCESS",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_SVM_DIRECT_HOST_ACCESS, &b));
  CHECK("a discrete gpu has no direct host access", !b, "true");
  CHECK_OK("gpu UCODE_VERSION", hsa_agent_get_info(gpu, (hsa_agent_info_t)AGENT_UCODE_VERSION, &u));
  CHECK_OK("gpu SDMA_UCODE_VERSION",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)AGENT_SDMA_UCODE_VERSION, &u));
  CHECK_OK("gpu IOMMU_SUPPORT", hsa_agent_get_info(gpu, (hsa_agent_info_t)AGENT_IOMMU_SUPPORT, &u));
  CHECK("gpu IOMMU support is NONE", u == 0, "%u", u);
  CHECK_OK("gpu NUM_XCC", hsa_agent_get_info(gpu, (hsa_agent_info_t)AGENT_NUM_XCC, &u));
  CHECK("gpu has 8 XCCs", u == 8, "%u", u);
  CHECK_OK("gpu MEMORY_PROPERTIES",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)AGENT_MEMORY_PROPERTIES, props));
  CHECK("gpu is not an APU", (props[0] & 1) == 0, "%#x", props[0]);
  CHECK_OK("gpu MEMORY_MAX_FREQUENCY",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_MEMORY_MAX_FREQUENCY, &u));
  CHECK("gpu memory clock is 2000 MHz", u == 2000, "%u", u);
  CHECK_OK("gpu DOMAIN", hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_DOMAIN, &u));
  b = true;
  CHECK_OK("gpu COOPERATIVE_QUEUES",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_COOPERATIVE_QUEUES, &b));
  CHECK("gpu offers no cooperative queues", !b, "true");
  hsa_amd_hdp_flush_t hdp = {NULL, NULL};
  CHECK_OK("gpu HDP_FLUSH", hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_HDP_FLUSH, &hdp));
  CHECK("gpu HDP flush controls are writable words", hdp.HDP_MEM_FLUSH_CNTL && hdp.HDP_REG_FLUSH_CNTL,
        "null");
  if (hdp.HDP_MEM_FLUSH_CNTL)
    *hdp.HDP_MEM_FLUSH_CNTL = 1;
  CHECK_OK("gpu COOPERATIVE_COMPUTE_UNIT_COUNT",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_COOPERATIVE_COMPUTE_UNIT_COUNT,
                              &u));
  uint64_t agent_freq = 0, system_freq = 1;
  hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &system_freq);
  CHECK_OK("gpu TIMESTAMP_FREQUENCY",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)AGENT_TIMESTAMP_FREQUENCY, &agent_freq));
  CHECK("gpu timestamps tick as the system's", agent_freq == system_freq, "%lu vs %lu",
        (unsigned long)agent_freq, (unsigned long)system_freq);
  hsa_agent_t nearest = {0}, cpu_agent = {0};
  struct agents all = {0};
  hsa_iterate_agents(find_agent, &all);
  cpu_agent = all.cpu;
  CHECK_OK("gpu NEAREST_CPU", hsa_agent_get_info(gpu, (hsa_agent_info_t)AGENT_NEAREST_CPU, &nearest));
  CHECK("the nearest cpu is the cpu agent", nearest.handle == cpu_agent.handle, "%#lx",
        (unsigned long)nearest.handle);
  hsa_default_float_rounding_mode_t base_mode = 0;
  CHECK_OK("gpu BASE_PROFILE_DEFAULT_FLOAT_ROUNDING_MODES",
           hsa_agent_get_info(gpu, HSA_AGENT_INFO_BASE_PROFILE_DEFAULT_FLOAT_ROUNDING_MODES,
                              &base_mode));
  CHECK("gpu base-profile rounding is NEAR", base_mode == HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR, "%d",
        base_mode);
  CHECK_OK("gpu COMPUTE_UNIT_COUNT",
           hsa_agent_get_info(gpu, (hsa_agent_info_t)HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, &u));
  CHECK("gpu has 256 CUs", u == 256, "%u", u);

  /* The ISA, three ways. */
  hsa_isa_t isa = {0}, listed = {0}, named = {0};
  char isa_name[128] = {0};
  CHECK_OK("gpu ISA", hsa_agent_get_info(gpu, HSA_AGENT_INFO_ISA, &isa));
  CHECK_OK("hsa_agent_iterate_isas", hsa_agent_iterate_isas(gpu, note_isa, &listed));
  CHECK("the iterated isa is the agent's", listed.handle == isa.handle && isa.handle != 0,
        "%#lx vs %#lx", (unsigned long)listed.handle, (unsigned long)isa.handle);
  CHECK_OK("isa NAME_LENGTH", hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME_LENGTH, &u));
  CHECK("isa name fits", u > 0 && u < sizeof isa_name, "%u", u);
  CHECK_OK("isa NAME", hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME, isa_name));
  CHECK("isa is gfx950 with its features", strcmp(isa_name, ISA_NAME) == 0, "`%s`", isa_name);
  CHECK_OK("hsa_isa_from_name", hsa_isa_from_name(ISA_NAME, &named));
  CHECK("the named isa is the agent's", named.handle == isa.handle, "%#lx",
        (unsigned long)named.handle);
  CHECK_OK("isa WORKGROUP_MAX_SIZE", hsa_isa_get_info_alt(isa, HSA_ISA_INFO_WORKGROUP_MAX_SIZE, &u));
  CHECK("isa workgroups hold 1024 work-items", u == 1024, "%u", u);
}

struct pool_expect {
  const char *what;
  hsa_amd_segment_t segment;
  uint32_t flags;
  int location;             /* HSA_AMD_MEMORY_POOL_LOCATION_CPU 0, GPU 1; -1 for none */
  size_t rec_granule;
  hsa_amd_memory_pool_access_t from_cpu, from_gpu;
};

static void pool_checks(hsa_agent_t owner, hsa_agent_t cpu, hsa_agent_t gpu,
                        const struct pool_expect *e) {
  char name[128];
  int n = 0;
  hsa_amd_memory_pool_t pool = pool_of(owner, e->segment, e->flags, &n);
#define NAMED(w) (snprintf(name, sizeof name, "%s pool %s", e->what, w), name)
  CHECK(NAMED("is listed once"), n == 1, "%d pools", n);
  if (n != 1)
    return;
  bool alloc = false, all = false;
  size_t size = 0, granule = 1, rec = 1;
  uint32_t location = 7, hops = 7;
  hsa_amd_memory_pool_access_t access;
  CHECK_OK(NAMED("SIZE"), hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SIZE, &size));
  CHECK_OK(NAMED("RUNTIME_ALLOC_ALLOWED"),
           hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                                        &alloc));
  CHECK_OK(NAMED("RUNTIME_ALLOC_GRANULE"),
           hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE,
                                        &granule));
  CHECK_OK(NAMED("ACCESSIBLE_BY_ALL"),
           hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL, &all));
  CHECK(NAMED("is accessible by all iff system memory"), all == (e->location == 0), "%d", all);
  CHECK_OK(NAMED("RUNTIME_ALLOC_REC_GRANULE"),
           hsa_amd_memory_pool_get_info(pool, (hsa_amd_memory_pool_info_t)POOL_REC_GRANULE, &rec));
  CHECK(NAMED("recommended granule"), rec == e->rec_granule, "%zu", rec);
  size_t max_alloc = 1;
  CHECK_OK(NAMED("ALLOC_MAX_SIZE"),
           hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE, &max_alloc));
  CHECK(NAMED("allocations up to its size, none from the group segment"),
        max_alloc == (e->segment == HSA_AMD_SEGMENT_GROUP ? 0 : size), "%zu of %zu", max_alloc, size);
  if (e->segment == HSA_AMD_SEGMENT_GROUP) {
    CHECK(NAMED("is the 160 KiB LDS, not allocatable"), size == 160 * 1024 && !alloc && granule == 0,
          "size %zu, allocatable %d, granule %zu", size, alloc, granule);
    CHECK_STATUS(NAMED("has no LOCATION"),
                 hsa_amd_memory_pool_get_info(pool, (hsa_amd_memory_pool_info_t)POOL_LOCATION,
                                              &location),
                 HSA_STATUS_ERROR_INVALID_ARGUMENT);
  } else {
    CHECK(NAMED("is allocatable in pages"), size > 0 && alloc && granule == 4096,
          "size %zu, allocatable %d, granule %zu", size, alloc, granule);
    CHECK_OK(NAMED("LOCATION"),
             hsa_amd_memory_pool_get_info(pool, (hsa_amd_memory_pool_info_t)POOL_LOCATION,
                                          &location));
    CHECK(NAMED("location"), (int)location == e->location, "%u", location);
  }
  CHECK_OK(NAMED("ACCESS from the cpu"),
           hsa_amd_agent_memory_pool_get_info(cpu, pool, HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS,
                                              &access));
  CHECK(NAMED("access from the cpu"), access == e->from_cpu, "%d", access);
  CHECK_OK(NAMED("ACCESS from the gpu"),
           hsa_amd_agent_memory_pool_get_info(gpu, pool, HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS,
                                              &access));
  CHECK(NAMED("access from the gpu"), access == e->from_gpu, "%d", access);
  CHECK_OK(NAMED("NUM_LINK_HOPS from the other agent"),
           hsa_amd_agent_memory_pool_get_info(owner.handle == cpu.handle ? gpu : cpu, pool,
                                              HSA_AMD_AGENT_MEMORY_POOL_INFO_NUM_LINK_HOPS, &hops));
  CHECK(NAMED("is one hop from the other agent, unless never accessible"),
        hops == (e->segment == HSA_AMD_SEGMENT_GROUP ? 0u : 1u), "%u", hops);
#undef NAMED
}

struct region_query {
  int n, system, kernarg;
  hsa_region_t kernarg_region;
};

static hsa_status_t note_region(hsa_region_t region, void *data) {
  struct region_query *q = data;
  hsa_region_segment_t segment;
  uint32_t flags = 0;
  bool host = false;
  q->n++;
  hsa_region_get_info(region, HSA_REGION_INFO_SEGMENT, &segment);
  if (segment == HSA_REGION_SEGMENT_GLOBAL)
    hsa_region_get_info(region, HSA_REGION_INFO_GLOBAL_FLAGS, &flags);
  hsa_region_get_info(region, (hsa_region_info_t)HSA_AMD_REGION_INFO_HOST_ACCESSIBLE, &host);
  if (host)
    q->system++;
  if (flags & HSA_REGION_GLOBAL_FLAG_KERNARG) {
    q->kernarg++;
    q->kernarg_region = region;
  }
  return HSA_STATUS_SUCCESS;
}

static void region_checks(hsa_agent_t cpu, hsa_agent_t gpu) {
  struct region_query c = {0}, g = {0};
  CHECK_OK("cpu regions", hsa_agent_iterate_regions(cpu, note_region, &c));
  CHECK("the cpu lists its three system regions", c.n == 3 && c.system == 3, "%d regions, %d system",
        c.n, c.system);
  CHECK_OK("gpu regions", hsa_agent_iterate_regions(gpu, note_region, &g));
  CHECK("the gpu lists its three regions and the system's", g.n == 6 && g.system == 3,
        "%d regions, %d system", g.n, g.system);
  CHECK("the gpu finds a kernarg region (vector_copy's search)", g.kernarg == 1, "%d", g.kernarg);
  void *base = (void *)1;
  CHECK_OK("kernarg region BASE",
           hsa_region_get_info(g.kernarg_region, (hsa_region_info_t)HSA_AMD_REGION_INFO_BASE, &base));
  CHECK("system memory has no aperture base", base == NULL, "%p", base);
  size_t granule = 0;
  CHECK_OK("kernarg region RUNTIME_ALLOC_GRANULE",
           hsa_region_get_info(g.kernarg_region, HSA_REGION_INFO_RUNTIME_ALLOC_GRANULE, &granule));
  void *p = NULL;
  CHECK_OK("hsa_memory_allocate from the kernarg region",
           hsa_memory_allocate(g.kernarg_region, 64, &p));
  if (p) {
    memset(p, 0x5a, 64);
    CHECK("kernarg memory is host memory", ((unsigned char *)p)[63] == 0x5a, "not written");
    CHECK_OK("hsa_memory_free", hsa_memory_free(p));
  }
}

static void extension_checks(hsa_agent_t gpu) {
  bool b = true;
  CHECK_OK("hsa_system_extension_supported",
           hsa_system_extension_supported(HSA_EXTENSION_AMD_LOADER, 1, 0, &b));
  CHECK("no extension table is offered", !b, "supported");
  b = true;
  CHECK_OK("hsa_agent_extension_supported",
           hsa_agent_extension_supported(HSA_EXTENSION_IMAGES, gpu, 1, 0, &b));
  CHECK("images are not supported", !b, "supported");
  char table[256];
  hsa_status_t s = hsa_system_get_major_extension_table(HSA_EXTENSION_AMD_LOADER, 1, sizeof table,
                                                        table);
  CHECK("an unsupported extension's table is refused", s != HSA_STATUS_SUCCESS, "success");
}

int main(void) {
  if (!start())
    return finish();
  struct agents a = {0};
  CHECK_OK("hsa_iterate_agents", hsa_iterate_agents(find_agent, &a));
  CHECK("one cpu and one gpu", a.cpus == 1 && a.gpus == 1, "%d cpus, %d gpus", a.cpus, a.gpus);
  system_checks();
  cpu_checks(a.cpu);
  gpu_checks(a.gpu);
  const hsa_amd_memory_pool_access_t NEVER = HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED,
                                     YES = HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT,
                                     ASK = HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT;
  const uint32_t FINE = HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
                 COARSE = HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
                 KERNARG = HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT;
  const struct pool_expect cpu_pools[] = {
      {"system fine-grained", HSA_AMD_SEGMENT_GLOBAL, FINE, 0, 4096, YES, ASK},
      {"system kernarg", HSA_AMD_SEGMENT_GLOBAL, KERNARG | FINE, 0, 4096, YES, ASK},
      {"system coarse-grained", HSA_AMD_SEGMENT_GLOBAL, COARSE, 0, 4096, YES, ASK},
  };
  const struct pool_expect gpu_pools[] = {
      {"gpu coarse-grained", HSA_AMD_SEGMENT_GLOBAL, COARSE, 1, 2 << 20, ASK, YES},
      {"gpu fine-grained", HSA_AMD_SEGMENT_GLOBAL, FINE, 1, 2 << 20, ASK, YES},
      {"gpu group", HSA_AMD_SEGMENT_GROUP, 0, -1, 0, NEVER, YES},
  };
  for (int i = 0; i < 3; i++) {
    pool_checks(a.cpu, a.cpu, a.gpu, &cpu_pools[i]);
    pool_checks(a.gpu, a.cpu, a.gpu, &gpu_pools[i]);
  }
  region_checks(a.cpu, a.gpu);
  extension_checks(a.gpu);
  CHECK_OK("hsa_shut_down", hsa_shut_down());
  return finish();
}
