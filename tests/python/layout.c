/* Prints the size and field offsets of the flashcl.h structs the Python package mirrors with
 * ctypes (python/flashcl/_lib.py), as JSON: test_layout.py compares them. */
#include <flashcl.h>
#include <stddef.h>
#include <stdio.h>

#include "kv_formats.h"

#define FIELD(type, field) printf("\"%s\": %zu, ", #field, offsetof(type, field))
#define SIZE(type) printf("\"sizeof\": %zu}", sizeof(type))

int main(void)
{
    printf("{\"TensorView\": {");
    FIELD(fcl_tensor_view, offset);
    FIELD(fcl_tensor_view, token_stride);
    SIZE(fcl_tensor_view);
    printf(", \"ContextOptions\": {");
    FIELD(fcl_context_options, device);
    FIELD(fcl_context_options, tuning);
    SIZE(fcl_context_options);
    printf(", \"SoftmaxDesc\": {");
    FIELD(fcl_softmax_desc, dtype);
    FIELD(fcl_softmax_desc, scale);
    FIELD(fcl_softmax_desc, algo);
    FIELD(fcl_softmax_desc, mask_dtype);
    FIELD(fcl_softmax_desc, alibi_from_mask);
    SIZE(fcl_softmax_desc);
    printf(", \"SoftmaxHostIO\": {");
    FIELD(fcl_softmax_host_io, alibi_slopes);
    SIZE(fcl_softmax_host_io);
    printf(", \"AttentionDesc\": {");
    FIELD(fcl_attention_desc, scale);
    FIELD(fcl_attention_desc, causal);
    FIELD(fcl_attention_desc, layout);
    FIELD(fcl_attention_desc, dtype_o);
    FIELD(fcl_attention_desc, kv_splits);
    FIELD(fcl_attention_desc, q_view);
    FIELD(fcl_attention_desc, o_view);
    FIELD(fcl_attention_desc, page_size);
    FIELD(fcl_attention_desc, softcap);
    FIELD(fcl_attention_desc, alibi_from_mask);
    FIELD(fcl_attention_desc, window);
    FIELD(fcl_attention_desc, window_right);
    FIELD(fcl_attention_desc, precision);
    FIELD(fcl_attention_desc, format_k);
    FIELD(fcl_attention_desc, k_scale);
    FIELD(fcl_attention_desc, v_scales_batch_stride);
    FIELD(fcl_attention_desc, k_scales_view);
    FIELD(fcl_attention_desc, v_scales_view);
    SIZE(fcl_attention_desc);
    printf(", \"AttentionHostIO\": {");
    FIELD(fcl_attention_host_io, block_table);
    FIELD(fcl_attention_host_io, v_scales);
    FIELD(fcl_attention_host_io, leftpad_kv);
    FIELD(fcl_attention_host_io, query_offsets);
    SIZE(fcl_attention_host_io);
    printf(", \"DeviceInfo\": {");
    FIELD(fcl_device_info, type);
    FIELD(fcl_device_info, local_mem_is_global);
    FIELD(fcl_device_info, kernel_work_group_size);
    FIELD(fcl_device_info, attention_rows_per_item);
    FIELD(fcl_device_info, attention_tiles);
    FIELD(fcl_device_info, tuning);
    FIELD(fcl_device_info, local_mem_reserved);
    FIELD(fcl_device_info, attention_mma_because);
    FIELD(fcl_device_info, softmax_nv_cols);
    SIZE(fcl_device_info);
    printf(", \"AttentionTile\": {");
    FIELD(struct fcl_attention_tile, local_mem_size);
    FIELD(struct fcl_attention_tile, rows_because);
    SIZE(struct fcl_attention_tile);
    /* ... and the K/V formats' table (cl/kv_formats.h): name -> [value, elements, bytes] */
#define FORMAT(NAME, name, value, dtype, elems, bytes, roles)                                  \
    printf("%s\"%s\": [%d, %d, %d]", value == 1 ? "" : ", ", #name, value, elems, bytes);
    printf(", \"KV_FORMATS\": {");
    FCL_KV_FORMATS(FORMAT)
    printf("}");
#undef FORMAT
    printf("}\n");
    return 0;
}
