/* The smallest complete flashcl program: softmax of a 2 x 4 matrix on the default device.
 * Build: cc softmax_host.c $(pkg-config --cflags --libs flashcl OpenCL)
 *    or: find_package(flashcl) and target_link_libraries(app PRIVATE flashcl::flashcl) */
#include <flashcl.h>
#include <math.h>
#include <stdio.h>

int main(void)
{
    fcl_context *ctx = NULL;
    fcl_status s = fcl_context_create(NULL, &ctx); /* FLASHCL_DEVICE picks another device */
    if (s != FCL_SUCCESS) {
        fprintf(stderr, "%s: %s\n", fcl_status_string(s), fcl_context_last_error(NULL));
        return 1;
    }
    const float x[2][4] = {{1, 3, 5, 2}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY}};
    float y[2][4], lse[2];
    fcl_softmax_desc d = {.rows = 2, .cols = 4}; /* zero fields are defaults */
    s = fcl_softmax_host(ctx, &d, x, NULL, y, lse);
    if (s != FCL_SUCCESS) {
        fprintf(stderr, "%s: %s\n", fcl_status_string(s), fcl_context_last_error(ctx));
        fcl_context_destroy(ctx);
        return 1;
    }
    for (int r = 0; r < 2; r++)
        printf("row %d: %.5f %.5f %.5f %.5f  lse %.5f\n", r, y[r][0], y[r][1], y[r][2], y[r][3],
               lse[r]);
    fcl_context_destroy(ctx);
    /* docs/ALGORITHMS.md: the first row's sum is 1.20344 around its max 5; the second is empty. */
    int ok = fabs(lse[0] - (5 + log(1.20344))) < 1e-4 && y[1][0] == 0 && lse[1] == -INFINITY;
    return ok ? 0 : 1;
}
