/*
 * native_table.h - the parameter table of the doubles' native code format,
 * read by the core where the driver tells no parameters (native_table.c).
 */
#ifndef ACC_NATIVE_TABLE_H
#define ACC_NATIVE_TABLE_H

#include "accel.h"

typedef struct acc_native_table acc_native_table;

/* The table of code (size bytes) when it is a shared object of the
 * host's machine exporting one, copied; NULL otherwise (also when out of
 * memory: the parameters then stay unknown).  Opens the object with
 * dlopen (its constructors run): call only for code the driver loaded. */
acc_native_table *acc_native_table_read(const void *code, size_t size);
/* Kernel name's parameters into info->nparams and info->params: 1 when
 * the table has it, else 0 (info untouched).  t may be NULL. */
int acc_native_table_params(const acc_native_table *t, const char *name,
                            acc_kernel_info *info);
void acc_native_table_free(acc_native_table *t);

#endif /* ACC_NATIVE_TABLE_H */
