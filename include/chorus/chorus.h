/* SPDX-License-Identifier: BSD-3-Clause */
/* The chorus C ABI (C99): stores, process groups, collectives and work handles for frameworks
 * and languages that cannot use the C++ API.
 *
 * Conventions, the same for every function:
 *  - Every function returns a chorus_result_t (CHORUS_OK or the error class) unless it is a
 *    plain accessor documented otherwise. No C++ exception ever crosses this boundary.
 *  - On failure, chorus_get_last_error() returns, on the calling thread, the same text the C++
 *    API would have thrown (what()). It stays valid until the next failing call on that thread.
 *  - Handles are opaque pointers, created by *_create / *_init functions and released by
 *    *_free / *_destroy. Releasing NULL is a no-op. A handle may be used from several threads
 *    when its C++ counterpart allows it (stores and groups do; one work handle per thread).
 *  - Config structs carry their size and version: initialize them with the matching
 *    CHORUS_*_INITIALIZER macro, then change the fields you need. A NULL config means defaults.
 *  - Durations are int64_t milliseconds; 0 means "the default" (the store's or group's timeout,
 *    which derives from CHORUS_TIMEOUT).
 *  - Tensors are borrowed: the caller keeps the memory alive, and does not write it, until
 *    the work handle of every op using it reports completion.
 */
#ifndef CHORUS_CHORUS_H
#define CHORUS_CHORUS_H

#include <stddef.h>
#include <stdint.h>

#include <chorus/version.h>

#if defined(_WIN32)
#define CHORUS_C_API
#else
#define CHORUS_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- results and errors ------------------------------------------------------------------ */

/* One code per chorus::ErrorCode (same numeric values), plus CHORUS_OK. */
typedef enum chorus_result_t {
  CHORUS_OK = 0,
  CHORUS_ERR_INVALID_ARGUMENT = 1, /* the caller's fault; nothing was sent */
  CHORUS_ERR_TIMEOUT = 2,          /* a deadline passed (a group is then aborted) */
  CHORUS_ERR_NETWORK = 3,          /* reset, refused, unreachable, bad handshake */
  CHORUS_ERR_STORE = 4,            /* the store refused a request or its protocol broke */
  CHORUS_ERR_BACKEND = 5,          /* NCCL/CUDA failed, or the backend was not built */
  CHORUS_ERR_ABORTED = 6,          /* the group was aborted */
  CHORUS_ERR_INTERNAL = 7          /* a chorus bug or out of memory: please report */
} chorus_result_t;

/* The message of the last failing call on this thread ("" if none failed yet). */
CHORUS_C_API const char* chorus_get_last_error(void);
/* "ok", "invalid_argument", "timeout", ... (never NULL). */
CHORUS_C_API const char* chorus_result_string(chorus_result_t result);
/* The library's version ("0.2.0"); compare with CHORUS_VERSION_STRING from the headers. */
CHORUS_C_API const char* chorus_version(void);
/* CHORUS_VERSION_CODE of the library. */
CHORUS_C_API int chorus_version_code(void);
/* Frees memory returned by chorus (chorus_store_get values). */
CHORUS_C_API void chorus_free(void* ptr);

/* ---- element types, reductions, tensors -------------------------------------------------- */

/* Same order and values as chorus::DataType. */
typedef enum chorus_dtype_t {
  CHORUS_INT8 = 0,
  CHORUS_UINT8 = 1,
  CHORUS_INT32 = 2,
  CHORUS_UINT32 = 3,
  CHORUS_INT64 = 4,
  CHORUS_UINT64 = 5,
  CHORUS_FLOAT16 = 6,
  CHORUS_BFLOAT16 = 7,
  CHORUS_FLOAT32 = 8,
  CHORUS_FLOAT64 = 9
} chorus_dtype_t;

/* Same order and values as chorus::ReduceOp. AVG = sum divided by the group size. */
typedef enum chorus_reduce_op_t {
  CHORUS_SUM = 0,
  CHORUS_PROD = 1,
  CHORUS_MIN = 2,
  CHORUS_MAX = 3,
  CHORUS_AVG = 4
} chorus_reduce_op_t;

typedef enum chorus_device_type_t {
  CHORUS_DEVICE_CPU = 0,
  CHORUS_DEVICE_CUDA = 1
} chorus_device_type_t;

/* A borrowed view of `count` contiguous elements: the raw-pointer form of a tensor. */
typedef struct chorus_tensor_t {
  void* data;
  size_t count;
  chorus_dtype_t dtype;
  chorus_device_type_t device_type;
  int device_index; /* CUDA ordinal; ignored for CPU */
} chorus_tensor_t;

/* A CPU tensor over `count` elements of `dtype` at `data`. */
static inline chorus_tensor_t chorus_cpu_tensor(void* data, size_t count, chorus_dtype_t dtype) {
  chorus_tensor_t t;
  t.data = data;
  t.count = count;
  t.dtype = dtype;
  t.device_type = CHORUS_DEVICE_CPU;
  t.device_index = 0;
  return t;
}

/* Fills *out from a DLPack tensor. `dl_tensor` is a `const DLTensor*` (dlpack.h, any version:
 * the DLTensor layout is ABI-stable); it is typed void* so this header never needs dlpack.h.
 * byte_offset is applied. INVALID_ARGUMENT (with the reason) for non-contiguous strides, an
 * unsupported dtype (complex, bool, float8, int16, vector lanes) or device. */
CHORUS_C_API chorus_result_t chorus_tensor_from_dlpack(const void* dl_tensor, chorus_tensor_t* out);

/* Bytes per element of dtype (0 if out of range). */
CHORUS_C_API size_t chorus_dtype_size(chorus_dtype_t dtype);

/* ---- shared buffers ---------------------------------------------------------------------- */

/* Host memory that the other ranks of a tcp group on this host map, so that allreduce,
 * reduce_scatter, allgather and broadcast of 256 KiB and more copy it once (chorus::SharedBuffer
 * in <chorus/shared_buffer.hpp> says when). Every rank passes such memory to an op or none does;
 * a rank that differs fails the op with INVALID_ARGUMENT on every rank. *out is the zero-filled,
 * page-aligned memory (NULL for 0 bytes); BACKEND, with the reason, when it cannot be had. */
CHORUS_C_API chorus_result_t chorus_shared_buffer_alloc(size_t bytes, void** out);
/* Frees memory from chorus_shared_buffer_alloc (NULL: no-op); INVALID_ARGUMENT for a pointer
 * that it did not return. */
CHORUS_C_API chorus_result_t chorus_shared_buffer_free(void* data);

/* ---- stores ------------------------------------------------------------------------------ */

#define CHORUS_CONFIG_VERSION 1u

typedef struct chorus_store chorus_store_t;               /* a chorus::Store */
typedef struct chorus_store_server chorus_store_server_t; /* a chorus::TcpStoreServer */

typedef struct chorus_tcp_store_config_t {
  size_t size;          /* sizeof(chorus_tcp_store_config_t) */
  unsigned int version; /* CHORUS_CONFIG_VERSION */
  const char* host;     /* server to connect to (bind address with is_server); copied */
  uint16_t port;        /* with is_server, 0 picks a free port: see chorus_store_port() */
  int is_server;        /* nonzero: also run the server inside this process */
  int wait_for_clients; /* > 0: return only once this many clients (this one included) joined */
  int64_t timeout_ms;   /* connect deadline and default call timeout; 0: CHORUS_TIMEOUT / 10 min */
} chorus_tcp_store_config_t;
#define CHORUS_TCP_STORE_CONFIG_INITIALIZER \
  { sizeof(chorus_tcp_store_config_t), CHORUS_CONFIG_VERSION, "127.0.0.1", 29500, 0, 0, 0 }

typedef struct chorus_store_server_config_t {
  size_t size;          /* sizeof(chorus_store_server_config_t) */
  unsigned int version; /* CHORUS_CONFIG_VERSION */
  const char* host;     /* bind address ("0.0.0.0", "::", "127.0.0.1"); copied */
  uint16_t port;        /* 0 picks a free port: see chorus_store_server_port() */
} chorus_store_server_config_t;
#define CHORUS_STORE_SERVER_CONFIG_INITIALIZER \
  { sizeof(chorus_store_server_config_t), CHORUS_CONFIG_VERSION, "0.0.0.0", 29500 }

/* Connects a TcpStore client (and hosts the server when config->is_server). */
CHORUS_C_API chorus_result_t chorus_tcp_store_create(const chorus_tcp_store_config_t* config,
                                                     chorus_store_t** store);
/* In-process store (threads of one process). */
CHORUS_C_API chorus_result_t chorus_hash_store_create(int64_t timeout_ms, chorus_store_t** store);
/* Store in a directory shared by every process (NFS on a cluster). */
CHORUS_C_API chorus_result_t chorus_file_store_create(const char* directory, int64_t timeout_ms,
                                                      chorus_store_t** store);
/* A view of `base` where every key is "<prefix>/key". base may be freed afterwards. */
CHORUS_C_API chorus_result_t chorus_prefix_store_create(const char* prefix, chorus_store_t* base,
                                                        chorus_store_t** store);
/* The TcpStore server's port (useful with port 0); INVALID_ARGUMENT if not a TcpStore. */
CHORUS_C_API chorus_result_t chorus_store_port(chorus_store_t* store, uint16_t* port);
CHORUS_C_API void chorus_store_free(chorus_store_t* store);

CHORUS_C_API chorus_result_t chorus_store_set(chorus_store_t* store, const char* key,
                                              const void* value, size_t length);
/* Waits for key (timeout_ms 0: the store's default). *value is malloc'ed memory of *length
 * bytes plus a terminating NUL (so text values are C strings); free it with chorus_free. */
CHORUS_C_API chorus_result_t chorus_store_get(chorus_store_t* store, const char* key,
                                              int64_t timeout_ms, void** value, size_t* length);
/* Atomically adds delta to the integer at key (missing = 0); *result = the new value. */
CHORUS_C_API chorus_result_t chorus_store_add(chorus_store_t* store, const char* key, int64_t delta,
                                              int64_t* result);
/* Waits until every one of the num_keys keys exists (TIMEOUT names those still missing). */
CHORUS_C_API chorus_result_t chorus_store_wait(chorus_store_t* store, const char* const* keys,
                                               size_t num_keys, int64_t timeout_ms);
/* *exists = 1 if every key exists now, else 0. Never waits. */
CHORUS_C_API chorus_result_t chorus_store_check(chorus_store_t* store, const char* const* keys,
                                                size_t num_keys, int* exists);
/* *deleted = 1 if the key existed (deleted may be NULL). */
CHORUS_C_API chorus_result_t chorus_store_delete_key(chorus_store_t* store, const char* key,
                                                     int* deleted);
CHORUS_C_API chorus_result_t chorus_store_num_keys(chorus_store_t* store, int64_t* num_keys);

/* A TcpStore server on its own (what chorus-store runs). */
CHORUS_C_API chorus_result_t chorus_store_server_create(const chorus_store_server_config_t* config,
                                                        chorus_store_server_t** server);
CHORUS_C_API uint16_t chorus_store_server_port(const chorus_store_server_t* server);
CHORUS_C_API void chorus_store_server_free(chorus_store_server_t* server);

/* ---- process groups ---------------------------------------------------------------------- */

typedef struct chorus_group chorus_group_t; /* a std::shared_ptr<chorus::ProcessGroup> */

typedef enum chorus_backend_t { CHORUS_BACKEND_TCP = 0, CHORUS_BACKEND_NCCL = 1 } chorus_backend_t;

/* Options shared by every backend (chorus::GroupOptions). */
typedef struct chorus_group_config_t {
  size_t size;          /* sizeof(chorus_group_config_t) */
  unsigned int version; /* CHORUS_CONFIG_VERSION */
  const char* name;     /* appears in log lines and errors; NULL: "world" */
  int64_t timeout_ms;   /* default op deadline; 0: CHORUS_TIMEOUT, else 10 min */
} chorus_group_config_t;
#define CHORUS_GROUP_CONFIG_INITIALIZER \
  { sizeof(chorus_group_config_t), CHORUS_CONFIG_VERSION, NULL, 0 }

typedef struct chorus_tcp_group_config_t {
  size_t size;           /* sizeof(chorus_tcp_group_config_t) */
  unsigned int version;  /* CHORUS_CONFIG_VERSION */
  const char* name;      /* NULL: "world" */
  int64_t timeout_ms;    /* 0: CHORUS_TIMEOUT, else 10 min */
  const char* interface; /* "eth0" or a local address; NULL: CHORUS_SOCKET_IFNAME or automatic */
  int sockets_per_peer;  /* 0: the default (1) */
} chorus_tcp_group_config_t;
#define CHORUS_TCP_GROUP_CONFIG_INITIALIZER \
  { sizeof(chorus_tcp_group_config_t), CHORUS_CONFIG_VERSION, NULL, 0, NULL, 0 }

typedef struct chorus_nccl_group_config_t {
  size_t size;          /* sizeof(chorus_nccl_group_config_t) */
  unsigned int version; /* CHORUS_CONFIG_VERSION */
  const char* name;     /* NULL: "world" */
  int64_t timeout_ms;   /* 0: CHORUS_TIMEOUT, else 10 min */
  int device;           /* CUDA device of this rank; -1: the current device */
  void* stream;         /* the caller's cudaStream_t; NULL: the legacy default stream */
} chorus_nccl_group_config_t;
#define CHORUS_NCCL_GROUP_CONFIG_INITIALIZER \
  { sizeof(chorus_nccl_group_config_t), CHORUS_CONFIG_VERSION, NULL, 0, -1, NULL }

/* The launcher's environment (chorusrun, torchrun, mpirun, srun: see chorus::init_from_env)
 * -> the world group. The store server runs on rank 0 unless the launcher hosts one. */
typedef struct chorus_init_config_t {
  size_t size;              /* sizeof(chorus_init_config_t) */
  unsigned int version;     /* CHORUS_CONFIG_VERSION */
  chorus_backend_t backend; /* CHORUS_BACKEND_TCP (default) or CHORUS_BACKEND_NCCL */
  const char* name;         /* NULL: "world" */
  int64_t timeout_ms;       /* ops and store calls; 0: CHORUS_TIMEOUT, else 10 min */
  int device;               /* nccl: CUDA device; -1: LOCAL_RANK (one GPU per process) */
  void* stream;             /* nccl: the caller's cudaStream_t; NULL: the legacy default stream */
} chorus_init_config_t;
#define CHORUS_INIT_CONFIG_INITIALIZER \
  { sizeof(chorus_init_config_t), CHORUS_CONFIG_VERSION, CHORUS_BACKEND_TCP, NULL, 0, -1, NULL }

/* Collective: every rank calls it. *group is the world group. If store is not NULL, *store is
 * the rendezvous store (for the application's own keys; the group's keys live under their own
 * prefix). On rank 0 the store may host the server: free it last. */
CHORUS_C_API chorus_result_t chorus_init_from_env(const chorus_init_config_t* config,
                                                  chorus_group_t** group, chorus_store_t** store);
/* Collective over ranks [0, size): blocks until every rank has joined and this rank's ring
 * neighbours are connected (links to other peers are made when an op first needs them). The
 * group keeps its own reference to the store; the store handle may be freed afterwards. */
CHORUS_C_API chorus_result_t chorus_group_create_tcp(chorus_store_t* store, int rank, int size,
                                                     const chorus_tcp_group_config_t* config,
                                                     chorus_group_t** group);
/* BACKEND if chorus was built without NCCL. */
CHORUS_C_API chorus_result_t chorus_group_create_nccl(chorus_store_t* store, int rank, int size,
                                                      const chorus_nccl_group_config_t* config,
                                                      chorus_group_t** group);
CHORUS_C_API chorus_result_t chorus_group_rank(const chorus_group_t* group, int* rank);
CHORUS_C_API chorus_result_t chorus_group_size(const chorus_group_t* group, int* size);
/* "tcp" or "nccl" (NULL for a NULL group). */
CHORUS_C_API const char* chorus_group_backend(const chorus_group_t* group);
/* Collective over the whole group: ranks sorted, distinct, in [0, size). *subgroup is NULL on
 * ranks not in `ranks`. */
CHORUS_C_API chorus_result_t chorus_group_split(chorus_group_t* group, const int* ranks,
                                                size_t num_ranks,
                                                const chorus_group_config_t* config,
                                                chorus_group_t** subgroup);
/* Elastic recovery (ProcessGroup::shrink in process_group.hpp): every surviving rank calls it
 * after a failure; the group is aborted, the survivors agree through the store on who is left,
 * and *survivors is their group (ranks renumbered in order). grace_ms: how long to wait for a
 * rank not known to be dead (0: 2000); join_timeout_ms: the bound on forming the new group (0:
 * 10000). A rank that arrives after the decision gets ABORTED ("fenced out"). config: the new
 * group's name and timeout (NULL: "<name>/shrink<k>", this group's timeout). */
CHORUS_C_API chorus_result_t chorus_group_shrink(chorus_group_t* group,
                                                 const chorus_group_config_t* config,
                                                 int64_t grace_ms, int64_t join_timeout_ms,
                                                 chorus_group_t** survivors);
/* Elastic growth (ProcessGroup::grow in process_group.hpp): every member calls it at the same
 * point (a step boundary). Admits the processes waiting in chorus_group_join_tcp on this group's
 * lobby; *grown is the larger group (members keep their ranks, joiners follow), or NULL when
 * nobody was waiting. wait_ms: how long to wait for a first joiner (0: do not wait);
 * join_timeout_ms: the bound on forming the larger group (0: 10000). If forming it fails on
 * any member, every member gets the error and this group goes on. config: the larger group's
 * name and timeout (NULL: "<lobby>/grow<k>", this group's timeout). */
CHORUS_C_API chorus_result_t chorus_group_grow(chorus_group_t* group,
                                               const chorus_group_config_t* config, int64_t wait_ms,
                                               int64_t join_timeout_ms, chorus_group_t** grown);
/* A new process joining a running tcp group (chorus::join_tcp_group): waits up to wait_ms (0:
 * config's timeout_ms, else CHORUS_TIMEOUT, else 10 min) until a member calls
 * chorus_group_grow, then *group is the larger group. store and config->name are those the
 * members' group was created with (the name is the lobby's; the group's own name and timeout
 * are the members'). ABORTED when the members stopped admitting, TIMEOUT when nobody let it
 * in. */
CHORUS_C_API chorus_result_t chorus_group_join_tcp(chorus_store_t* store,
                                                   const chorus_tcp_group_config_t* config,
                                                   int64_t wait_ms, int64_t join_timeout_ms,
                                                   chorus_group_t** group);
/* Joiners waiting now or later get ABORTED with reason (ProcessGroup::stop_admitting). */
CHORUS_C_API chorus_result_t chorus_group_stop_admitting(chorus_group_t* group, const char* reason);
/* Fails every pending and future op (ABORTED with reason, unless the group already failed). */
CHORUS_C_API chorus_result_t chorus_group_abort(chorus_group_t* group, const char* reason);
/* Releases this handle. Ops still in flight keep what they need alive. */
CHORUS_C_API void chorus_group_destroy(chorus_group_t* group);

/* ---- collectives ------------------------------------------------------------------------- */

typedef struct chorus_work chorus_work_t; /* a std::shared_ptr<chorus::Work> */

/* wire_dtype of an op: the group's default (CHORUS_WIRE_DTYPE, else full precision). */
#define CHORUS_WIRE_DEFAULT (-1)

/* Per-call options; NULL means defaults (sum, root 0, the group's timeout and wire). */
typedef struct chorus_op_options_t {
  size_t size;           /* sizeof(chorus_op_options_t) */
  unsigned int version;  /* CHORUS_CONFIG_VERSION */
  chorus_reduce_op_t op; /* allreduce, reduce_scatter, reduce */
  int root;              /* broadcast, reduce, gather, scatter */
  int64_t timeout_ms;    /* this op's deadline; 0: the group's timeout */
  /* allreduce, reduce_scatter, reduce (C++: AllreduceOptions::wire_dtype): the chorus_dtype_t
   * the data travels in between hosts, CHORUS_BFLOAT16 or CHORUS_FLOAT16 for CHORUS_FLOAT32
   * data, CHORUS_FLOAT32 for CHORUS_FLOAT64 data (sum and avg; partial sums are rounded as they
   * leave for another host and added in the data's type); the data's own dtype: full
   * precision; CHORUS_WIRE_DEFAULT: the group's default. */
  int wire_dtype;
} chorus_op_options_t;
#define CHORUS_OP_OPTIONS_INITIALIZER \
  { sizeof(chorus_op_options_t), CHORUS_CONFIG_VERSION, CHORUS_SUM, 0, 0, CHORUS_WIRE_DEFAULT }

/* Each launches the op and returns its handle in *work (free it with chorus_work_free).
 * Argument errors (size mismatch, bad root, wrong device) fail here with INVALID_ARGUMENT,
 * before anything is sent. Same semantics as the C++ ProcessGroup methods; in == out means
 * in-place. */
CHORUS_C_API chorus_result_t chorus_allreduce(chorus_group_t* group, const chorus_tensor_t* in,
                                              const chorus_tensor_t* out,
                                              const chorus_op_options_t* options,
                                              chorus_work_t** work);
CHORUS_C_API chorus_result_t chorus_allgather(chorus_group_t* group, const chorus_tensor_t* in,
                                              const chorus_tensor_t* out,
                                              const chorus_op_options_t* options,
                                              chorus_work_t** work);
CHORUS_C_API chorus_result_t chorus_reduce_scatter(chorus_group_t* group, const chorus_tensor_t* in,
                                                   const chorus_tensor_t* out,
                                                   const chorus_op_options_t* options,
                                                   chorus_work_t** work);
CHORUS_C_API chorus_result_t chorus_broadcast(chorus_group_t* group, const chorus_tensor_t* inout,
                                              const chorus_op_options_t* options,
                                              chorus_work_t** work);
CHORUS_C_API chorus_result_t chorus_reduce(chorus_group_t* group, const chorus_tensor_t* in,
                                           const chorus_tensor_t* out,
                                           const chorus_op_options_t* options,
                                           chorus_work_t** work);
CHORUS_C_API chorus_result_t chorus_gather(chorus_group_t* group, const chorus_tensor_t* in,
                                           const chorus_tensor_t* out,
                                           const chorus_op_options_t* options,
                                           chorus_work_t** work);
CHORUS_C_API chorus_result_t chorus_scatter(chorus_group_t* group, const chorus_tensor_t* in,
                                            const chorus_tensor_t* out,
                                            const chorus_op_options_t* options,
                                            chorus_work_t** work);
CHORUS_C_API chorus_result_t chorus_all_to_all(chorus_group_t* group, const chorus_tensor_t* in,
                                               const chorus_tensor_t* out,
                                               const chorus_op_options_t* options,
                                               chorus_work_t** work);
CHORUS_C_API chorus_result_t chorus_barrier(chorus_group_t* group,
                                            const chorus_op_options_t* options,
                                            chorus_work_t** work);
CHORUS_C_API chorus_result_t chorus_send(chorus_group_t* group, const chorus_tensor_t* tensor,
                                         int dst, uint32_t tag, const chorus_op_options_t* options,
                                         chorus_work_t** work);
/* src may be CHORUS_ANY_SOURCE: the first message with this tag from any rank;
 * chorus_work_source_rank() then names the sender (not on the nccl backend). */
#define CHORUS_ANY_SOURCE (-1)
CHORUS_C_API chorus_result_t chorus_recv(chorus_group_t* group, const chorus_tensor_t* tensor,
                                         int src, uint32_t tag, const chorus_op_options_t* options,
                                         chorus_work_t** work);

/* One op as data (C++: chorus::OpDescriptor, include/chorus/process_group.hpp) for chorus_run, the
 * one entry: the functions above are shorthands for the classic ops, and every other op (the
 * variable-size collectives, a coalesced op) is reached through it. Fields an op does not use
 * are ignored. */
typedef enum chorus_op_type_t {
  CHORUS_OP_ALLREDUCE = 0,
  CHORUS_OP_ALLGATHER = 1,
  CHORUS_OP_REDUCE_SCATTER = 2,
  CHORUS_OP_BROADCAST = 3, /* the tensor is `in` */
  CHORUS_OP_REDUCE = 4,
  CHORUS_OP_GATHER = 5,
  CHORUS_OP_SCATTER = 6,
  CHORUS_OP_ALL_TO_ALL = 7,
  CHORUS_OP_BARRIER = 8,
  CHORUS_OP_SEND = 9,  /* the message is `in`; peer: the destination */
  CHORUS_OP_RECV = 10, /* the message is `in`; peer: the source or CHORUS_ANY_SOURCE */
  /* The variable-size collectives: each counts array has one entry per rank of the group,
   * rank j's block has counts[j] elements, the blocks lie back to back in rank order.
   * allgatherv: out (sum of out_counts) = every rank's in (out_counts[rank]); every rank
   * passes the same out_counts. reduce_scatterv: out (in_counts[rank]) = this rank's block of
   * the reduction (op) of every rank's in (sum of in_counts); every rank passes the same
   * in_counts. all_to_allv: block j of in (in_counts[j]) goes to rank j, block i of out
   * (out_counts[i]) comes from rank i; out-of-place only. */
  CHORUS_OP_ALLGATHERV = 11,
  CHORUS_OP_REDUCE_SCATTERV = 12,
  CHORUS_OP_ALL_TO_ALLV = 13,
  CHORUS_OP_TYPE_COUNT /* the number of op types; not an op */
} chorus_op_type_t;
typedef struct chorus_op_t {
  size_t size;          /* sizeof(chorus_op_t) */
  unsigned int version; /* CHORUS_CONFIG_VERSION */
  chorus_op_type_t type;
  chorus_tensor_t in;
  chorus_tensor_t out;
  const size_t* in_counts;  /* one entry per rank, or NULL (see CHORUS_OP_ALLGATHERV ...) */
  const size_t* out_counts; /* one entry per rank, or NULL */
  chorus_reduce_op_t op;
  int root;
  int peer;
  uint32_t tag;
  int64_t timeout_ms; /* this op's deadline; 0: the group's timeout */
  /* Coalesced (C++: OpDescriptor::ins/outs): num_tensors > 0 runs the op once over the pairs
   * (ins[i], outs[i]) instead of in/out, which must then be empty (count 0). allreduce,
   * allgather and reduce_scatter only; one dtype; each pair shaped as the op on one tensor;
   * in place: outs[i] is ins[i]. One op: one sequence number, one chorus_work_t. */
  const chorus_tensor_t* ins;
  const chorus_tensor_t* outs;
  size_t num_tensors;
  int wire_dtype; /* as chorus_op_options_t's */
} chorus_op_t;
#define CHORUS_OP_INITIALIZER                                                                     \
  {                                                                                               \
    sizeof(chorus_op_t), CHORUS_CONFIG_VERSION, CHORUS_OP_BARRIER,                                \
        {NULL, 0, CHORUS_UINT8, CHORUS_DEVICE_CPU, 0},                                            \
        {NULL, 0, CHORUS_UINT8, CHORUS_DEVICE_CPU, 0}, NULL, NULL, CHORUS_SUM, 0, -1, 0, 0, NULL, \
        NULL, 0, CHORUS_WIRE_DEFAULT                                                              \
  }
/* Launches the op *op describes (same rules and results as the functions above). */
CHORUS_C_API chorus_result_t chorus_run(chorus_group_t* group, const chorus_op_t* op,
                                        chorus_work_t** work);

/* ---- work handles ------------------------------------------------------------------------ */

/* Blocks until the op is done and returns its result (for nccl: orders the caller's stream
 * after the op instead of blocking the host, as Work::wait does). */
CHORUS_C_API chorus_result_t chorus_work_wait(chorus_work_t* work);
/* Waits at most timeout_ms (0: just look). *done = 1 once finished; then returns the op's
 * result. Still running: CHORUS_OK with *done = 0. Never aborts the op. */
CHORUS_C_API chorus_result_t chorus_work_wait_for(chorus_work_t* work, int64_t timeout_ms,
                                                  int* done);
/* chorus_work_wait_for(work, 0, done). */
CHORUS_C_API chorus_result_t chorus_work_test(chorus_work_t* work, int* done);
/* The op's sequence number in its group (0 for NULL). */
CHORUS_C_API uint64_t chorus_work_seq(const chorus_work_t* work);
/* For a completed recv: the rank its message came from; -1 for other ops, while running, or
 * for NULL. */
CHORUS_C_API int chorus_work_source_rank(const chorus_work_t* work);
/* Releases the handle; an op still running completes on its own. */
CHORUS_C_API void chorus_work_free(chorus_work_t* work);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CHORUS_CHORUS_H */
