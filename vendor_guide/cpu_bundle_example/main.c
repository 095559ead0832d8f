/* Runs a glowsdk CPU bundle without glowsdk (see ../cpu_bundle.md).
 *
 *   cc -O2 -I BUNDLE_DIR main.c BUNDLE_DIR/bundle*.o -lm -o run_bundle
 *
 * (every object of the bundle: bundle.o, and bundle.1.o, .. when it was compiled in
 * parts; bundle.h's comment gives the exact link line)
 *   ./run_bundle BUNDLE_DIR/bundle.weights IN_1.bin ... IN_n.bin OUT_1.bin ... OUT_m.bin
 *
 * One raw little-endian file per input and output, in the order of the header's
 * tensor table (inputs first). Prints each output's shape and first values.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"

#define NUM_TENSORS (GLOWSDK_BUNDLE_NUM_INPUTS + GLOWSDK_BUNDLE_NUM_OUTPUTS)

/* A zeroed region of `bytes`, aligned as the bundle requires (at least one alignment unit). */
static uint8_t *region(uint64_t bytes) {
  uint64_t size = (bytes / GLOWSDK_BUNDLE_ALIGNMENT + 1) * GLOWSDK_BUNDLE_ALIGNMENT;
  uint8_t *p = aligned_alloc(GLOWSDK_BUNDLE_ALIGNMENT, size);
  if (p == NULL) {
    fprintf(stderr, "out of memory (%llu bytes)\n", (unsigned long long)size);
    exit(1);
  }
  memset(p, 0, size);
  return p;
}

/* Read exactly `bytes` from `path` into `into`; 0 on success. */
static int read_exact(const char *path, uint8_t *into, uint64_t bytes) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    perror(path);
    return 1;
  }
  size_t got = fread(into, 1, bytes, f);
  int more = fgetc(f) != EOF;
  fclose(f);
  if (got != bytes || more) {
    fprintf(stderr, "%s: expected exactly %llu bytes\n", path, (unsigned long long)bytes);
    return 1;
  }
  return 0;
}

static int write_all(const char *path, const uint8_t *from, uint64_t bytes) {
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(from, 1, bytes, f) != bytes || fclose(f) != 0) {
    perror(path);
    return 1;
  }
  return 0;
}

static void describe(const glowsdk_bundle_tensor *t, const uint8_t *data) {
  printf("%s %s[", t->is_input ? "input " : "output", t->elem);
  for (uint32_t d = 0; d < t->rank; d++) printf(d ? "x%lld" : "%lld", (long long)t->shape[d]);
  printf("] %s", t->name);
  if (!t->is_input && strcmp(t->elem, "float32") == 0) {
    const float *values = (const float *)data;
    uint64_t count = t->bytes / sizeof(float);
    printf(":");
    for (uint64_t i = 0; i < count && i < 5; i++) printf(" %g", values[i]);
  }
  printf("\n");
}

int main(int argc, char **argv) {
  if (argc != 2 + NUM_TENSORS) {
    fprintf(stderr, "usage: %s WEIGHTS", argv[0]);
    for (unsigned i = 0; i < NUM_TENSORS; i++)
      fprintf(stderr, " %s.bin", glowsdk_bundle_tensors[i].name);
    fprintf(stderr, "\n");
    return 2;
  }
  uint8_t *constants = region(GLOWSDK_BUNDLE_CONSTANT_BYTES);
  uint8_t *activations = region(GLOWSDK_BUNDLE_ACTIVATION_BYTES);
  uint8_t *placeholders = region(GLOWSDK_BUNDLE_PLACEHOLDER_BYTES);
  if (read_exact(argv[1], constants, GLOWSDK_BUNDLE_CONSTANT_BYTES)) return 1;
  for (unsigned i = 0; i < GLOWSDK_BUNDLE_NUM_INPUTS; i++) {
    const glowsdk_bundle_tensor *t = &glowsdk_bundle_tensors[i];
    if (read_exact(argv[2 + i], placeholders + t->offset, t->bytes)) return 1;
  }
  int32_t status = glowsdk_main(constants, activations, placeholders);
  if (status != 0) {
    fprintf(stderr, "the network failed with status %d (an index out of range)\n", status);
    return 1;
  }
  for (unsigned i = 0; i < NUM_TENSORS; i++) {
    const glowsdk_bundle_tensor *t = &glowsdk_bundle_tensors[i];
    describe(t, placeholders + t->offset);
    if (!t->is_input && write_all(argv[2 + i], placeholders + t->offset, t->bytes)) return 1;
  }
  free(constants);
  free(activations);
  free(placeholders);
  return 0;
}
