/* Storage formats on the host: the table of cl/kv_formats.h (shared with the kernels) as
 * traits, and what follows from it: an element's or a unit's bytes, a row's units, names. */
#include "internal.h"

#include <stddef.h>

#define FCL_TRAITS_ENTRY(NAME, lower, value, type, n, size, role)                              \
    [value] = {.name = #lower, .elems = (n), .bytes = (size), .dtype = (type), .roles = (role)},
static const fcl_format_traits traits[FCL_KV_FORMAT_MAX + 1] = {FCL_KV_FORMATS(FCL_TRAITS_ENTRY)};
#undef FCL_TRAITS_ENTRY

/* The public enums and the table agree. */
#define FCL_CHECK_ENTRY(NAME, name, value, dtype, elems, bytes, roles)                         \
    _Static_assert(FCL_KV_##NAME == (value), "fcl_kv_format and cl/kv_formats.h differ");      \
    _Static_assert((dtype) < 0 || (dtype) + 1 == (value), "fcl_dtype t is format t + 1");
FCL_KV_FORMATS(FCL_CHECK_ENTRY)
#undef FCL_CHECK_ENTRY

#define FCL_DTYPE_NAME(NAME, name, value, dtype, elems, bytes, roles) #name,
const char *const fcl_dtype_suffix[FCL_DTYPE_COUNT] = {FCL_FLOAT_FORMATS(FCL_DTYPE_NAME)};
#undef FCL_DTYPE_NAME

const fcl_format_traits *fcl_format(unsigned format)
{
    return format >= 1 && format <= FCL_KV_FORMAT_MAX ? &traits[format] : NULL;
}

unsigned fcl_format_of_dtype(fcl_dtype t) { return (unsigned)t + 1; }

size_t fcl_dtype_size(fcl_dtype t)
{
    const fcl_format_traits *f = fcl_format(fcl_format_of_dtype(t));
    return f && (f->roles & FCL_ROLE_FLOAT) ? f->bytes : 0;
}

size_t fcl_format_unit_bytes(unsigned format)
{
    const fcl_format_traits *f = fcl_format(format);
    return !f ? 0 : (f->roles & FCL_ROLE_FLOAT) ? f->bytes : 1;
}

size_t fcl_format_row_units(unsigned format, size_t dim)
{
    const fcl_format_traits *f = fcl_format(format);
    return !f ? 0 : (f->roles & FCL_ROLE_FLOAT) ? dim : dim / f->elems * f->bytes;
}
