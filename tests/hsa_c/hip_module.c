/* HIP over the HSA runtime LD_LIBRARY_PATH selects: the device count, a module loaded from a
 * code object, its function, device buffers, a launch and a synchronize. Usage: hip_module
 * CODE_OBJECT, holding kernel `scale` (out[i] = 2 * in[i] + 1, 64-item workgroups).
 *
 * HIP's entry points are declared here (Debian's libamdhip64-5 ships no headers without the
 * whole HIP development stack). Exit status: 0 when every step passes; 3 when HIP finds no
 * device (HIP 5.2's ISA table has no gfx950: rocclr's amd::Isa::findIsa refuses the agent's
 * ISA name during hipGetDeviceCount, after the HSA runtime has been started and queried);
 * 1 on any other failure. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef int hipError_t;
typedef void *hipModule_t;
typedef void *hipFunction_t;
typedef void *hipStream_t;
hipError_t hipGetDeviceCount(int *count);
const char *hipGetErrorName(hipError_t error);
hipError_t hipModuleLoadData(hipModule_t *module, const void *image);
hipError_t hipModuleGetFunction(hipFunction_t *function, hipModule_t module, const char *name);
hipError_t hipMalloc(void **ptr, size_t size);
hipError_t hipFree(void *ptr);
hipError_t hipMemcpy(void *dst, const void *src, size_t size, int kind);
hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz,
                                 unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                 hipStream_t stream, void **params, void **extra);
hipError_t hipDeviceSynchronize(void);
enum { HIP_MEMCPY_HOST_TO_DEVICE = 1, HIP_MEMCPY_DEVICE_TO_HOST = 2, HIP_ERROR_NO_DEVICE = 100 };
#define HIP_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define HIP_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
#define HIP_LAUNCH_PARAM_END ((void *)0x03)

enum { N = 256, WG = 64 };
static int failures;

static int step(const char *name, hipError_t e) {
  if (e == 0)
    printf("PASS %s\n", name);
  else {
    printf("FAIL %s: %s (%d)\n", name, hipGetErrorName(e), e);
    failures++;
  }
  return e == 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s CODE_OBJECT\n", argv[0]);
    return 2;
  }
  static char image[1 << 20];
  FILE *f = fopen(argv[1], "rb");
  size_t size = f ? fread(image, 1, sizeof image, f) : 0;
  if (f)
    fclose(f);
  if (size == 0) {
    printf("FAIL read %s\n", argv[1]);
    return 1;
  }
  int count = 0;
  hipError_t e = hipGetDeviceCount(&count);
  if (e == HIP_ERROR_NO_DEVICE) {
    printf("INFO hipGetDeviceCount: %s: HIP refuses the device\n", hipGetErrorName(e));
    return 3;
  }
  if (!step("hipGetDeviceCount", e) || count < 1)
    return 1;
  hipModule_t module;
  hipFunction_t function;
  if (!step("hipModuleLoadData", hipModuleLoadData(&module, image)) ||
      !step("hipModuleGetFunction", hipModuleGetFunction(&function, module, "scale")))
    return 1;
  uint32_t in[N], out[N];
  for (int i = 0; i < N; i++)
    in[i] = (uint32_t)(i * 7 + 3);
  void *d_in = NULL, *d_out = NULL;
  step("hipMalloc", hipMalloc(&d_in, sizeof in));
  step("hipMalloc", hipMalloc(&d_out, sizeof out));
  step("hipMemcpy to the device", hipMemcpy(d_in, in, sizeof in, HIP_MEMCPY_HOST_TO_DEVICE));
  void *args[2] = {d_in, d_out};
  size_t args_size = sizeof args;
  void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, args, HIP_LAUNCH_PARAM_BUFFER_SIZE, &args_size,
                   HIP_LAUNCH_PARAM_END};
  step("hipModuleLaunchKernel",
       hipModuleLaunchKernel(function, N / WG, 1, 1, WG, 1, 1, 0, NULL, NULL, extra));
  step("hipDeviceSynchronize", hipDeviceSynchronize());
  memset(out, 0, sizeof out);
  step("hipMemcpy to the host", hipMemcpy(out, d_out, sizeof out, HIP_MEMCPY_DEVICE_TO_HOST));
  int ok = 1;
  for (int i = 0; i < N; i++)
    ok &= out[i] == 2 * in[i] + 1;
  printf("%s the kernel's results\n", ok ? "PASS" : "FAIL");
  failures += !ok;
  hipFree(d_in);
  hipFree(d_out);
  return failures == 0 ? 0 : 1;
}
