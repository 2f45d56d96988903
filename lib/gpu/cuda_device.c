/* Device open/close over the primary context. */
#include "gpu/cuda_device.h"

#include <stdlib.h>
#include <string.h>

static const char *visible_devices(void) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  return v ? v : "unset";
}

dsv4_status dsv4i_cuda_device_open(int32_t ordinal, dsv4i_cuda_device *d) {
  memset(d, 0, sizeof *d);
  const dsv4i_cu *cu = NULL;
  dsv4_status st = dsv4i_cu_get(&cu);
  if (st != DSV4_OK) return st;

  if (cu->driver_version < DSV4I_PTX_CUDA_VERSION)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "the NVIDIA driver supports CUDA %d.%d, but libdsv4's kernels were compiled "
                       "to PTX by a CUDA %d.%d toolkit and need a driver for CUDA %d.%d or newer",
                       cu->driver_version / 1000, cu->driver_version % 1000 / 10,
                       DSV4I_PTX_CUDA_VERSION / 1000, DSV4I_PTX_CUDA_VERSION % 1000 / 10,
                       DSV4I_PTX_CUDA_VERSION / 1000, DSV4I_PTX_CUDA_VERSION % 1000 / 10);

  int count = 0;
  dsv4i_cures r = cu->DeviceGetCount(&count);
  if (r != DSV4I_CUDA_SUCCESS) return dsv4i_cu_fail(cu, r, "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count)
    return dsv4i_error(DSV4_ERR_NO_DEVICE,
                       "CUDA device %d does not exist: the driver sees %d device(s) "
                       "(CUDA_VISIBLE_DEVICES=%s)",
                       (int)ordinal, count, visible_devices());

  dsv4i_cudev dev = 0;
  r = cu->DeviceGet(&dev, ordinal);
  if (r != DSV4I_CUDA_SUCCESS) return dsv4i_cu_fail(cu, r, "cuDeviceGet(%d)", (int)ordinal);
  r = cu->DeviceGetName(d->name, (int)sizeof d->name, dev);
  if (r != DSV4I_CUDA_SUCCESS) return dsv4i_cu_fail(cu, r, "cuDeviceGetName(%d)", (int)ordinal);
  d->name[sizeof d->name - 1] = '\0';
  int major = 0, minor = 0, n_sm = 0;
  r = cu->DeviceGetAttribute(&major, DSV4I_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  if (r == DSV4I_CUDA_SUCCESS)
    r = cu->DeviceGetAttribute(&minor, DSV4I_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  if (r == DSV4I_CUDA_SUCCESS)
    r = cu->DeviceGetAttribute(&n_sm, DSV4I_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  if (r != DSV4I_CUDA_SUCCESS)
    return dsv4i_cu_fail(cu, r, "cuDeviceGetAttribute(device %d)", (int)ordinal);
  int32_t sm = major * 10 + minor;
  if (sm < DSV4I_MIN_SM)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "CUDA device %d (%s) has compute capability %d.%d; libdsv4's kernels need "
                       "8.0 (Ampere) or newer",
                       (int)ordinal, d->name, major, minor);

  dsv4i_cuctx prev = NULL, ctx = NULL;
  r = cu->CtxGetCurrent(&prev);
  if (r != DSV4I_CUDA_SUCCESS) return dsv4i_cu_fail(cu, r, "cuCtxGetCurrent");
  r = cu->DevicePrimaryCtxRetain(&ctx, dev);
  if (r != DSV4I_CUDA_SUCCESS)
    return dsv4i_cu_fail(cu, r, "cuDevicePrimaryCtxRetain(device %d, %s)", (int)ordinal, d->name);
  r = cu->CtxSetCurrent(ctx);
  if (r != DSV4I_CUDA_SUCCESS) {
    st = dsv4i_cu_fail(cu, r, "cuCtxSetCurrent(primary context of device %d)", (int)ordinal);
    cu->DevicePrimaryCtxRelease(dev);
    return st;
  }
  d->cu = cu;
  d->ordinal = ordinal;
  d->dev = dev;
  d->ctx = ctx;
  d->prev_ctx = prev;
  d->sm = sm;
  d->n_sm = n_sm;
  return DSV4_OK;
}

void dsv4i_cuda_device_close(dsv4i_cuda_device *d) {
  if (!d->cu || !d->ctx) return;
  /* failures here leave nothing to undo: the driver reports them on the next call */
  d->cu->CtxSetCurrent(d->prev_ctx);
  d->cu->DevicePrimaryCtxRelease(d->dev);
  d->ctx = NULL;
  d->cu = NULL;
}
