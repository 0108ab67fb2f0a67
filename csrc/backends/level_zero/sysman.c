/*
 * sysman.c - what Sysman (zes) adds to the core API: the PCI address,
 * the device's memory modules and their free memory.
 */
#include "lz.h"

/*
 * Sysman (zes) reads what the core API cannot: free memory and the PCI
 * address.  Intel's driver answers only when Sysman was enabled before
 * zeInit (ZES_ENABLE_SYSMAN=1, which a library must not set for its
 * process); otherwise, as where the loader has no entry, the calls fail
 * with these codes and the numbers are estimates instead.
 */
static int
lz_sysman_absent(ze_result_t r)
{
    return r == ZE_RESULT_ERROR_UNINITIALIZED
           || r == ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
}

/* Find the memory modules located on the device, once (lz.sysman_lock
 * held).  A driver error is reported and tried again next time. */
acc_status
lz_memory_modules_locked(lz_device *dev, acc_error *err)
{
    if (dev->sysman != 0) {
        return ACC_OK;
    }
    uint32_t n = 0;
    ze_result_t r = lz_fn.zesDeviceEnumMemoryModules(dev->handle, &n, NULL);
    if (lz_sysman_absent(r)) {
        acc_trace("xpu: no Sysman memory modules (0x%x): free memory is "
                  "an estimate", (unsigned)r);
        dev->sysman = -1;
        return ACC_OK;
    }
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zesDeviceEnumMemoryModules", r, dev->driver);
    }
    zes_mem_handle_t *mems = calloc(n ? n : 1, sizeof(*mems));
    if (mems == NULL) {
        return lz_no_memory(err);
    }
    if (n > 0) {
        r = lz_fn.zesDeviceEnumMemoryModules(dev->handle, &n, mems);
        if (r != ZE_RESULT_SUCCESS) {
            free(mems);
            return lz_fail(err, "zesDeviceEnumMemoryModules", r,
                           dev->driver);
        }
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        zes_mem_properties_t p;
        memset(&p, 0, sizeof(p));
        p.stype = ZES_STRUCTURE_TYPE_MEM_PROPERTIES;
        r = lz_fn.zesMemoryGetProperties(mems[i], &p);
        if (r != ZE_RESULT_SUCCESS) {
            free(mems);
            return lz_fail(err, "zesMemoryGetProperties", r, dev->driver);
        }
        if (p.location == ZES_MEM_LOC_DEVICE) {
            mems[k++] = mems[i];
        }
    }
    if (k == 0) {
        acc_trace("xpu: Sysman lists no device memory: free memory is an "
                  "estimate");
        free(mems);
        dev->sysman = -1;
        return ACC_OK;
    }
    dev->mems = mems;
    dev->nmems = k;
    dev->sysman = 1;
    return ACC_OK;
}

acc_status
lz_device_properties(int device, acc_device_properties *props,
                     acc_error *err)
{
    lz_device *dev = &lz.devices[device];
    const ze_device_properties_t *p = &dev->props;
    memset(props, 0, sizeof(*props));
    /* The driver's name need not end in NUL within its 256 bytes. */
    memcpy(props->name, p->name, sizeof(props->name) - 1);
    memcpy(props->uuid, p->uuid.id, sizeof(props->uuid));
    props->total_memory = dev->total_memory;
    props->multi_processor_count =
        (int)(p->numSlices * p->numSubslicesPerSlice * p->numEUsPerSubslice);
    props->major = -1;
    props->minor = -1;
    props->vendor_id = p->vendorId;
    props->device_id = p->deviceId;
    props->integrated = (p->flags & ZE_DEVICE_PROPERTY_FLAG_INTEGRATED) != 0;

    /* Half and double support are module (kernel) properties.  Core Level
     * Zero has no bfloat16 flag. */
    ze_device_module_properties_t module;
    memset(&module, 0, sizeof(module));
    module.stype = ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES;
    ze_result_t mr = lz_fn.zeDeviceGetModuleProperties(dev->handle, &module);
    if (mr != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeDeviceGetModuleProperties", mr, dev->driver);
    }
    props->float_types =
        ((module.flags & ZE_DEVICE_MODULE_FLAG_FP16) ? ACC_FLOAT_16 : 0)
        | ((module.flags & ZE_DEVICE_MODULE_FLAG_FP64) ? ACC_FLOAT_64 : 0);

    zes_pci_properties_t pci;
    memset(&pci, 0, sizeof(pci));
    pci.stype = ZES_STRUCTURE_TYPE_PCI_PROPERTIES;
    ze_result_t r = lz_fn.zesDevicePciGetProperties(dev->handle, &pci);
    if (r == ZE_RESULT_SUCCESS) {
        snprintf(props->pci_bus_id, sizeof(props->pci_bus_id),
                 "%04x:%02x:%02x.%x", pci.address.domain & 0xffffu,
                 pci.address.bus & 0xffu, pci.address.device & 0x1fu,
                 pci.address.function & 0x7u);
    }
    else if (!lz_sysman_absent(r)) {
        return lz_fail(err, "zesDevicePciGetProperties", r, dev->driver);
    }
    pthread_mutex_lock(&lz.sysman_lock);
    acc_status status = lz_memory_modules_locked(dev, err);
    if (status == ACC_OK && dev->sysman < 0) {
        props->estimates |= ACC_ESTIMATE_FREE_MEMORY;
    }
    pthread_mutex_unlock(&lz.sysman_lock);
    return status;
}
