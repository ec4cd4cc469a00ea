/* Misuse a client can make, and the statuses HSA documents for it: before hsa_init (checked
 * against any runtime) and after it (invalid handles, unsupported features). */
#include "check.h"

#include <hsa/hsa_ext_image.h>

enum {
  STATUS_INVALID_REGION = 0x1005,  /* HSA_STATUS_ERROR_INVALID_REGION */
  STATUS_INVALID_ISA_NAME = 0x1017, /* HSA_STATUS_ERROR_INVALID_ISA_NAME */
  STATUS_INVALID_FILE = 0x1020,    /* HSA_STATUS_ERROR_INVALID_FILE */
};

static hsa_status_t on_event(const hsa_amd_event_t *event, void *data) {
  (void)event;
  (void)data;
  return HSA_STATUS_SUCCESS;
}

int main(void) {
  if (!start())
    return finish();
  struct agents a = {0};
  hsa_iterate_agents(find_agent, &a);
  CHECK_OK("hsa_amd_register_system_event_handler",
           hsa_amd_register_system_event_handler(on_event, NULL));
  hsa_agent_t bogus = {0x1234};
  char name[64];
  void *p = NULL;
  CHECK_STATUS("an unknown agent", hsa_agent_get_info(bogus, HSA_AGENT_INFO_NAME, name),
               HSA_STATUS_ERROR_INVALID_AGENT);
  CHECK_STATUS("an unknown attribute", hsa_agent_get_info(a.gpu, (hsa_agent_info_t)0x7777, name),
               HSA_STATUS_ERROR_INVALID_ARGUMENT);
  hsa_amd_memory_pool_t no_pool = {0x1234};
  CHECK_STATUS("an unknown pool", hsa_amd_memory_pool_allocate(no_pool, 4096, 0, &p),
               HSA_STATUS_ERROR_INVALID_MEMORY_POOL);
  hsa_amd_memory_pool_t group = pool_of(a.gpu, HSA_AMD_SEGMENT_GROUP, 0, NULL);
  CHECK_STATUS("allocating from the group segment", hsa_amd_memory_pool_allocate(group, 4096, 0, &p),
               HSA_STATUS_ERROR_INVALID_ALLOCATION);
  hsa_amd_memory_pool_t coarse =
      pool_of(a.gpu, HSA_AMD_SEGMENT_GLOBAL, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, NULL);
  CHECK_STATUS("a zero-byte allocation", hsa_amd_memory_pool_allocate(coarse, 0, 0, &p),
               HSA_STATUS_ERROR_INVALID_ALLOCATION);
  hsa_region_t no_region = {0x1234};
  size_t size;
  CHECK_STATUS("an unknown region", hsa_region_get_info(no_region, HSA_REGION_INFO_SIZE, &size),
               (hsa_status_t)STATUS_INVALID_REGION);
  hsa_code_object_reader_t reader;
  CHECK_STATUS("a code object from a closed file", hsa_code_object_reader_create_from_file(999, &reader),
               (hsa_status_t)STATUS_INVALID_FILE);
  hsa_isa_t isa;
  CHECK_STATUS("an ISA of another GPU", hsa_isa_from_name("amdgcn-amd-amdhsa--gfx1100", &isa),
               (hsa_status_t)STATUS_INVALID_ISA_NAME);
  hsa_signal_t s;
  hsa_signal_create(1, 0, NULL, &s);
  hsa_amd_profiling_dispatch_time_t t;
  CHECK_STATUS("dispatch times from the cpu", hsa_amd_profiling_get_dispatch_time(a.cpu, s, &t),
               HSA_STATUS_ERROR_INVALID_AGENT);
  CHECK_OK("hsa_signal_destroy", hsa_signal_destroy(s));
  CHECK_STATUS("a signal destroyed twice", hsa_signal_destroy(s), HSA_STATUS_ERROR_INVALID_SIGNAL);
  hsa_queue_t *q = NULL;
  hsa_queue_create(a.gpu, 64, HSA_QUEUE_TYPE_MULTI, NULL, NULL, UINT32_MAX, UINT32_MAX, &q);
  CHECK_STATUS("a queue priority out of range", hsa_amd_queue_set_priority(q, (hsa_amd_queue_priority_t)9),
               HSA_STATUS_ERROR_INVALID_ARGUMENT);
  uint32_t mask = 1;
  CHECK_STATUS("a CU mask that is not whole words", hsa_amd_queue_cu_set_mask(q, 33, &mask),
               HSA_STATUS_ERROR_INVALID_ARGUMENT);
  hsa_queue_destroy(q);
  CHECK_STATUS("a destroyed queue", hsa_amd_profiling_set_profiler_enabled(q, 1),
               HSA_STATUS_ERROR_INVALID_QUEUE);
  CHECK_STATUS("unlocking memory never locked", hsa_amd_memory_unlock(&mask),
               HSA_STATUS_ERROR_INVALID_ARGUMENT);

  /* What the runtime cannot do is refused, never pretended. */
  void *buf = NULL;
  hsa_amd_memory_pool_allocate(coarse, 4096, 0, &buf);
  hsa_amd_ipc_memory_t ipc;
  CHECK_STATUS("IPC export", hsa_amd_ipc_memory_create(buf, 4096, &ipc), HSA_STATUS_ERROR);
  CHECK_STATUS("IPC of memory that is no allocation", hsa_amd_ipc_memory_create(&mask, 4, &ipc),
               HSA_STATUS_ERROR_INVALID_ARGUMENT);
  hsa_amd_svm_attribute_pair_t attr = {HSA_AMD_SVM_ATTRIB_GLOBAL_FLAG, 0};
  CHECK_STATUS("SVM attributes", hsa_amd_svm_attributes_get(buf, 4096, &attr, 1), HSA_STATUS_ERROR);
  hsa_ext_image_descriptor_t desc;
  memset(&desc, 0, sizeof desc);
  hsa_ext_image_t image;
  CHECK_STATUS("an image", hsa_ext_image_create(a.gpu, &desc, buf, HSA_ACCESS_PERMISSION_RW, &image),
               HSA_EXT_STATUS_ERROR_IMAGE_FORMAT_UNSUPPORTED);
  hsa_ext_sampler_descriptor_t sd;
  memset(&sd, 0, sizeof sd);
  hsa_ext_sampler_t sampler;
  CHECK_STATUS("a sampler", hsa_ext_sampler_create(a.gpu, &sd, &sampler),
               HSA_EXT_STATUS_ERROR_SAMPLER_DESCRIPTOR_UNSUPPORTED);
  size_t isize = 0;
  void *iptr = NULL;
  CHECK_STATUS("graphics interop", hsa_amd_interop_map_buffer(1, &a.gpu, 3, 0, &isize, &iptr, NULL, NULL),
               HSA_STATUS_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS("IPC attach", hsa_amd_ipc_memory_attach(&ipc, 4096, 1, &a.gpu, &iptr), HSA_STATUS_ERROR);
  CHECK_STATUS("IPC detach of memory never attached", hsa_amd_ipc_memory_detach(buf),
               HSA_STATUS_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS("SVM attributes set", hsa_amd_svm_attributes_set(buf, 4096, &attr, 1), HSA_STATUS_ERROR);
  hsa_signal_t done;
  hsa_signal_create(1, 0, NULL, &done);
  CHECK_STATUS("SVM prefetch", hsa_amd_svm_prefetch_async(buf, 4096, a.gpu, 0, NULL, done),
               HSA_STATUS_ERROR);
  hsa_signal_destroy(done);
  CHECK_STATUS("graphics interop unmap", hsa_amd_interop_unmap_buffer(buf),
               HSA_STATUS_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS("an image with a layout",
               hsa_ext_image_create_with_layout(a.gpu, &desc, buf, HSA_ACCESS_PERMISSION_RW,
                                                HSA_EXT_IMAGE_DATA_LAYOUT_LINEAR, 0, 0, &image),
               HSA_EXT_STATUS_ERROR_IMAGE_FORMAT_UNSUPPORTED);
  hsa_ext_image_data_info_t image_info;
  CHECK_STATUS("image data info",
               hsa_ext_image_data_get_info(a.gpu, &desc, HSA_ACCESS_PERMISSION_RW, &image_info),
               HSA_EXT_STATUS_ERROR_IMAGE_FORMAT_UNSUPPORTED);
  hsa_amd_image_descriptor_t layout;
  memset(&layout, 0, sizeof layout);
  CHECK_STATUS("an AMD image",
               hsa_amd_image_create(a.gpu, &desc, &layout, buf, HSA_ACCESS_PERMISSION_RW, &image),
               HSA_EXT_STATUS_ERROR_IMAGE_FORMAT_UNSUPPORTED);
  image.handle = 1;
  hsa_ext_image_region_t region;
  memset(&region, 0, sizeof region);
  CHECK_STATUS("destroying an image that cannot exist", hsa_ext_image_destroy(a.gpu, image),
               HSA_STATUS_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS("exporting an image that cannot exist",
               hsa_ext_image_export(a.gpu, image, buf, 0, 0, &region), HSA_STATUS_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS("importing into an image that cannot exist",
               hsa_ext_image_import(a.gpu, buf, 0, 0, image, &region), HSA_STATUS_ERROR_INVALID_ARGUMENT);
  sampler.handle = 1;
  CHECK_STATUS("destroying a sampler that cannot exist", hsa_ext_sampler_destroy(a.gpu, sampler),
               HSA_STATUS_ERROR_INVALID_ARGUMENT);
  void *table[8];
  CHECK("the deprecated extension table call refuses too",
        hsa_system_get_extension_table(HSA_EXTENSION_AMD_LOADER, 1, 0, table) != HSA_STATUS_SUCCESS,
        "success");
  hsa_amd_memory_pool_free(buf);
  CHECK_STATUS("memory freed twice", hsa_amd_memory_pool_free(buf), HSA_STATUS_ERROR_INVALID_ARGUMENT);
  const char *text = NULL;
  CHECK_OK("hsa_status_string", hsa_status_string(HSA_STATUS_ERROR_INVALID_ARGUMENT, &text));
  CHECK("a status string names the status", text && strstr(text, "INVALID_ARGUMENT"), "`%s`",
        text ? text : "(null)");
  CHECK_OK("hsa_shut_down", hsa_shut_down());
  CHECK_STATUS("hsa_shut_down once more", hsa_shut_down(), HSA_STATUS_ERROR_NOT_INITIALIZED);
  return finish();
}
