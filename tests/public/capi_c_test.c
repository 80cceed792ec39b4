/* SPDX-License-Identifier: BSD-3-Clause */
/* The C ABI from C (built as C99 with -pedantic against chorus_dep only): status codes and
 * messages, config versioning, a store and a one-rank group, all without C++. */
#include <chorus/chorus.h>

#include <stdio.h>
#include <string.h>

static int failures = 0;

#define EXPECT(cond)                                                                     \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "%s:%d: FAILED: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              chorus_get_last_error());                                                  \
      ++failures;                                                                        \
    }                                                                                    \
  } while (0)

int main(void) {
  chorus_tcp_store_config_t sc = CHORUS_TCP_STORE_CONFIG_INITIALIZER;
  chorus_tcp_group_config_t gc = CHORUS_TCP_GROUP_CONFIG_INITIALIZER;
  chorus_op_options_t opts = CHORUS_OP_OPTIONS_INITIALIZER;
  chorus_op_t op = CHORUS_OP_INITIALIZER;
  size_t counts[1] = {4};
  chorus_store_t* store = NULL;
  chorus_group_t* group = NULL;
  chorus_work_t* work = NULL;
  float a[4] = {1, 2, 3, 4};
  float small[2];
  chorus_tensor_t ta, ts;
  void* value = NULL;
  size_t length = 0;
  int done = 0;

  EXPECT(strcmp(chorus_version(), CHORUS_VERSION_STRING) == 0);
  EXPECT(chorus_version_code() == CHORUS_VERSION_CODE);

  /* Errors are codes plus a message. */
  EXPECT(chorus_group_rank(NULL, NULL) == CHORUS_ERR_INVALID_ARGUMENT);
  EXPECT(strstr(chorus_get_last_error(), "chorus_group_rank") != NULL);
  sc.version = 99;
  EXPECT(chorus_tcp_store_create(&sc, &store) == CHORUS_ERR_INVALID_ARGUMENT);
  EXPECT(strstr(chorus_get_last_error(), "CHORUS_TCP_STORE_CONFIG_INITIALIZER") != NULL);

  /* A store hosted here, and a one-rank tcp group over it. */
  sc.version = CHORUS_CONFIG_VERSION;
  sc.port = 0;
  sc.is_server = 1;
  sc.timeout_ms = 10000;
  EXPECT(chorus_tcp_store_create(&sc, &store) == CHORUS_OK);
  EXPECT(chorus_store_set(store, "k", "v", 1) == CHORUS_OK);
  EXPECT(chorus_store_get(store, "k", 0, &value, &length) == CHORUS_OK);
  EXPECT(length == 1 && value != NULL && strcmp((const char*)value, "v") == 0);
  chorus_free(value);
  EXPECT(chorus_store_get(store, "missing", 100, &value, &length) == CHORUS_ERR_TIMEOUT);
  EXPECT(strstr(chorus_get_last_error(), "missing") != NULL);

  gc.interface = "127.0.0.1";
  EXPECT(chorus_group_create_tcp(store, 1, 1, &gc, &group) ==
         CHORUS_ERR_INVALID_ARGUMENT); /* bad rank */
  EXPECT(chorus_group_create_tcp(store, 0, 1, &gc, &group) == CHORUS_OK);
  if (group != NULL) {
    ta = chorus_cpu_tensor(a, 4, CHORUS_FLOAT32);
    ts = chorus_cpu_tensor(small, 2, CHORUS_FLOAT32);
    EXPECT(chorus_allreduce(group, &ta, &ts, NULL, &work) == CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_get_last_error(), "must match") != NULL);
    opts.op = CHORUS_MAX;
    EXPECT(chorus_allreduce(group, &ta, &ta, &opts, &work) == CHORUS_OK);
    EXPECT(chorus_work_wait_for(work, 5000, &done) == CHORUS_OK && done == 1);
    chorus_work_free(work);
    EXPECT(a[3] == 4.0f);
    /* The one entry: an op as data. */
    op.type = CHORUS_OP_ALLGATHERV;
    op.in = ta;
    op.out = ta; /* in place: the input is the output's only block */
    op.out_counts = counts;
    EXPECT(chorus_run(group, &op, &work) == CHORUS_OK);
    EXPECT(chorus_work_wait(work) == CHORUS_OK);
    chorus_work_free(work);
    counts[0] = 3;
    EXPECT(chorus_run(group, &op, &work) == CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_get_last_error(), "allgatherv") != NULL);
    chorus_group_destroy(group);
  }
  chorus_store_free(store);
  printf("%s\n", failures == 0 ? "C ABI from C: OK" : "C ABI from C: FAILED");
  return failures == 0 ? 0 : 1;
}
