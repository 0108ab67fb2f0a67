/*
 * native_kernel.h - the doubles' native code format.  The header ships
 * with the package (accelerator.get_include(), then
 * <accelerator/native_kernel.h>) so that a user's native kernels need no
 * checkout; the doubles and the tests' kernels include it from here.
 */
#include "../../csrc/include/accelerator/native_kernel.h"
