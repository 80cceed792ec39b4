/* SPDX-License-Identifier: BSD-3-Clause */
/* The shortest correct chorus program in C: every rank adds its rank + 1; chorusrun -n 4. */
#include <stdio.h>

#include <chorus/chorus.h>

#define CHECK(call)                                                             \
  do {                                                                          \
    chorus_result_t rc_ = (call);                                               \
    if (rc_ != CHORUS_OK) {                                                     \
      fprintf(stderr, "%s failed (%s): %s\n", #call, chorus_result_string(rc_), \
              chorus_get_last_error());                                         \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

int main(void) {
  chorus_group_t* group = NULL;
  chorus_work_t* work = NULL;
  int rank = 0, size = 0;
  float x[4];
  chorus_tensor_t t;
  CHECK(chorus_init_from_env(NULL, &group, NULL));
  CHECK(chorus_group_rank(group, &rank));
  CHECK(chorus_group_size(group, &size));
  for (int i = 0; i < 4; ++i) {
    x[i] = (float)(rank + 1);
  }
  t = chorus_cpu_tensor(x, 4, CHORUS_FLOAT32);
  CHECK(chorus_allreduce(group, &t, &t, NULL, &work)); /* in place, sum */
  CHECK(chorus_work_wait(work));
  chorus_work_free(work);
  printf("rank %d/%d: %g (expected %d)\n", rank, size, (double)x[0], size * (size + 1) / 2);
  chorus_group_destroy(group);
  return x[0] == (float)(size * (size + 1) / 2) ? 0 : 1;
}
