# SPDX-License-Identifier: BSD-3-Clause
"""Every torch.distributed op x dtype x ReduceOp on chorus, against gloo's result in the same
processes (a gloo group made beside the chorus default group) and against a reference computed
locally from every rank's input (which each rank can rebuild). Where gloo refuses a combination
(e.g. AVG, bfloat16 on 1.13) the local reference alone decides. Prints the counts."""
import torch
import torch.distributed as dist

from common import all_gather_into_tensor, check, fail, init, reduce_scatter_tensor, say

rank, n = init()
gloo = dist.new_group(backend="gloo")
counts = {"vs_gloo": 0, "vs_reference_only": 0, "errors_checked": 0}
gloo_wrong = []  # ops where gloo's own result differs from the exact reference

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.bool]
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX, "AVG": dist.ReduceOp.AVG}


def data(r, dtype, numel=11, salt=0):
    """Rank r's input: small integers so every reduction is exact in every dtype."""
    g = torch.Generator().manual_seed(1000 * r + 7 * salt + DTYPES.index(dtype))
    if dtype == torch.bool:
        return torch.randint(0, 2, (numel,), generator=g).bool()
    return torch.randint(1, 4, (numel,), generator=g).to(dtype)


def reference(name, tensors, dtype):
    if dtype == torch.bool:
        stack = torch.stack([t.to(torch.int64) for t in tensors])
        op = {"SUM": "MAX", "PRODUCT": "MIN"}.get(name, name)
    else:
        stack = torch.stack([t.to(torch.float64) for t in tensors])
        op = name
    if op == "SUM":
        out = stack.sum(0)
    elif op == "PRODUCT":
        out = stack.prod(0)
    elif op == "MIN":
        out = stack.min(0).values
    elif op == "MAX":
        out = stack.max(0).values
    elif op == "AVG":
        out = stack.sum(0) / len(tensors)
        if not dtype.is_floating_point:
            out = torch.trunc(out)
    return out.to(dtype)


def same(a, b, what):
    check(a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{list(a.shape)} vs "
          f"{b.dtype}{list(b.shape)}")
    if not torch.equal(a, b):
        fail(f"{what}: chorus {a.tolist()} != expected {b.tolist()}")


def as_list(x):
    return x if isinstance(x, list) else [x]


def verify(run, what, want):
    """run(group) -> tensor or list. chorus's result must equal the local reference `want`
    exactly; gloo's result, when gloo can run the op, is compared too. The reference decides:
    where gloo's result differs from it, that is gloo's bug (noted, not a chorus failure)."""
    for a, b in zip(as_list(run(None)), as_list(want)):
        same(a, b, what)
    try:
        theirs = run(gloo)
    except RuntimeError:
        counts["vs_reference_only"] += 1
        return
    if all(torch.equal(a, b) for a, b in zip(as_list(theirs), as_list(want))):
        counts["vs_gloo"] += 1
    else:
        gloo_wrong.append(what)


def expect_error(fn, words, what):
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        text = str(e)
        check(all(w in text for w in words), f"{what}: error {text!r} lacks {words}")
        counts["errors_checked"] += 1
        return
    fail(f"{what}: no error raised")


for dtype in DTYPES:
    inputs = [data(r, dtype) for r in range(n)]
    for name, op in OPS.items():
        if dtype == torch.bool and name == "AVG":
            expect_error(lambda: dist.all_reduce(inputs[rank].clone(), op=op), ["AVG", "bool"],
                         "all_reduce AVG bool")
            continue
        want = reference(name, inputs, dtype)

        def allreduce(group, op=op):
            t = inputs[rank].clone()
            dist.all_reduce(t, op=op, group=group)
            return t
        verify(allreduce, f"all_reduce {name} {dtype}", want)

        root = (DTYPES.index(dtype) + len(name)) % n

        def reduce(group, op=op, root=root):
            t = inputs[rank].clone()
            dist.reduce(t, dst=root, op=op, group=group)
            return t if rank == root else want
        verify(reduce, f"reduce {name} {dtype}", want)

        # reduce_scatter: rank r's list block j is data(r, salt=j); block `rank` of the result.
        blocks = [[data(r, dtype, 5, salt=j) for j in range(n)] for r in range(n)]
        want_rs = reference(name, [blocks[r][rank] for r in range(n)], dtype)

        def reduce_scatter(group, op=op):
            out = torch.zeros(5, dtype=dtype)
            dist.reduce_scatter(out, [b.clone() for b in blocks[rank]], op=op, group=group)
            return out
        verify(reduce_scatter, f"reduce_scatter {name} {dtype}", want_rs)

        def reduce_scatter_flat(group, op=op):
            out = torch.zeros(5, dtype=dtype)
            reduce_scatter_tensor(out, torch.cat(blocks[rank]), op=op, group=group)
            return out
        verify(reduce_scatter_flat, f"reduce_scatter_tensor {name} {dtype}", want_rs)

    # Data movement: no ReduceOp.
    for root in range(n):
        def broadcast(group, root=root):
            t = inputs[rank].clone()
            dist.broadcast(t, src=root, group=group)
            return t
        verify(broadcast, f"broadcast {dtype}", inputs[root])

    def all_gather(group):
        out = [torch.zeros_like(inputs[rank]) for _ in range(n)]
        dist.all_gather(out, inputs[rank], group=group)
        return out
    verify(all_gather, f"all_gather {dtype}", inputs)

    def all_gather_flat(group):
        out = torch.zeros(n * inputs[rank].numel(), dtype=dtype)
        all_gather_into_tensor(out, inputs[rank], group=group)
        return out
    verify(all_gather_flat, f"all_gather_into_tensor {dtype}", torch.cat(inputs))

    root = DTYPES.index(dtype) % n

    def gather(group):
        out = [torch.zeros_like(inputs[rank]) for _ in range(n)] if rank == root else None
        dist.gather(inputs[rank], gather_list=out, dst=root, group=group)
        return out if rank == root else inputs
    verify(gather, f"gather {dtype}", inputs)

    pieces = [data(root, dtype, 4, salt=10 + j) for j in range(n)]

    def scatter(group):
        out = torch.zeros(4, dtype=dtype)
        dist.scatter(out, scatter_list=[p.clone() for p in pieces] if rank == root else None,
                     src=root, group=group)
        return out
    verify(scatter, f"scatter {dtype}", pieces[rank])

    # all_to_all_single, even and uneven; all_to_all with lists of different sizes.
    send = [data(rank, dtype, 3, salt=20 + j) for j in range(n)]
    want_recv = [data(j, dtype, 3, salt=20 + rank) for j in range(n)]

    def a2a_single(group):
        out = torch.zeros(3 * n, dtype=dtype)
        dist.all_to_all_single(out, torch.cat(send), group=group)
        return out
    verify(a2a_single, f"all_to_all_single {dtype}", torch.cat(want_recv))

    def rows(src, dst):  # rows rank src sends to rank dst
        return (src + 2 * dst) % 3

    send_u = [data(rank, dtype, rows(rank, j) * 2, salt=30 + j).view(-1, 2) for j in range(n)]
    recv_u = [data(j, dtype, rows(j, rank) * 2, salt=30 + rank).view(-1, 2) for j in range(n)]

    def a2a_uneven(group):
        out = torch.zeros(sum(r.shape[0] for r in recv_u), 2, dtype=dtype)
        dist.all_to_all_single(out, torch.cat(send_u), output_split_sizes=[r.shape[0] for r in recv_u],
                               input_split_sizes=[s.shape[0] for s in send_u], group=group)
        return out
    verify(a2a_uneven, f"all_to_all_single uneven {dtype}", torch.cat(recv_u))

    def a2a_list(group):
        out = [torch.zeros_like(r) for r in recv_u]
        dist.all_to_all(out, [s.clone() for s in send_u], group=group)
        return out
    verify(a2a_list, f"all_to_all {dtype}", recv_u)

    # Point to point around the ring, blocking and non-blocking, with tags.
    right, left = (rank + 1) % n, (rank - 1) % n
    got = torch.zeros_like(inputs[rank])
    if rank % 2 == 0:
        dist.send(inputs[rank], dst=right, tag=3)
        dist.recv(got, src=left, tag=3)
    else:
        dist.recv(got, src=left, tag=3)
        dist.send(inputs[rank], dst=right, tag=3)
    same(got, inputs[left], f"send/recv {dtype}")
    got2 = torch.zeros_like(inputs[rank])
    reqs = [dist.irecv(got2, src=left, tag=9), dist.isend(inputs[rank].clone(), dst=right, tag=9)]
    for q in reqs:
        q.wait()
    same(got2, inputs[left], f"isend/irecv {dtype}")

# Non-contiguous tensors (transposed views): results land in the user's view.
base = torch.arange(12, dtype=torch.float32).view(3, 4) * (rank + 1)
view = base.t()
check(not view.is_contiguous(), "the test view should be non-contiguous")
dist.all_reduce(view)
same(view.contiguous(), (torch.arange(12, dtype=torch.float32).view(3, 4) * sum(range(1, n + 1))).t().contiguous(),
     "all_reduce non-contiguous")
bview = torch.zeros(4, 3).t() + rank
dist.broadcast(bview, src=n - 1)
same(bview, torch.zeros(3, 4) + (n - 1), "broadcast non-contiguous")
outs = [torch.zeros(2, 3).t() for _ in range(n)]
dist.all_gather(outs, torch.full((3, 2), float(rank)))
for j, o in enumerate(outs):
    same(o.contiguous(), torch.full((3, 2), float(j)), "all_gather into non-contiguous outputs")

# Several tensors in one call: coalesced allreduce and allgather.
ts = [torch.full((k + 1,), float(rank + k)) for k in range(3)]
gl = [t.clone() for t in ts]
dist.all_reduce_coalesced(ts)
dist.all_reduce_coalesced(gl, group=gloo)
for a, b in zip(ts, gl):
    same(a, b, "all_reduce_coalesced vs gloo")
counts["vs_gloo"] += 1
outl = [[torch.zeros(k + 1) for k in range(2)] for _ in range(n)]
dist.all_gather_coalesced(outl, [torch.full((k + 1,), float(rank * 10 + k)) for k in range(2)])
for j in range(n):
    for k in range(2):
        same(outl[j][k], torch.full((k + 1,), float(j * 10 + k)), "all_gather_coalesced")
# One chorus op over every tensor (OpDescriptor::ins/outs): sizes differing, an empty one, a
# non-contiguous one (staged and copied back), MAX, against gloo.
ts = [torch.arange(5.0) * (rank + 1), torch.zeros(0), torch.full((3, 2), float(rank)).t(),
      torch.arange(700.0) - rank]
gl = [t.clone() for t in ts]
dist.all_reduce_coalesced(ts, op=dist.ReduceOp.MAX)
dist.all_reduce_coalesced(gl, op=dist.ReduceOp.MAX, group=gloo)
for a, b in zip(ts, gl):
    same(a, b, "all_reduce_coalesced (MAX, uneven, non-contiguous) vs gloo")
check(not ts[2].is_contiguous(), "all_reduce_coalesced kept the tensor's own layout")
counts["vs_gloo"] += 1

# Object collectives (pickled over allgather / broadcast / gather / scatter).
objs = [None] * n
dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank})
check(objs == [{"rank": j, "s": "x" * j} for j in range(n)], f"all_gather_object: {objs}")
lst = [f"from root {n - 1}", {"k": [1, 2]}] if rank == n - 1 else [None, None]
dist.broadcast_object_list(lst, src=n - 1)
check(lst == [f"from root {n - 1}", {"k": [1, 2]}], f"broadcast_object_list: {lst}")
gathered = [None] * n if rank == 0 else None
dist.gather_object(("r", rank), gathered, dst=0)
if rank == 0:
    check(gathered == [("r", j) for j in range(n)], f"gather_object: {gathered}")
got_obj = [None]
dist.scatter_object_list(got_obj, [f"obj{j}" for j in range(n)] if rank == 0 else None, src=0)
check(got_obj[0] == f"obj{rank}", f"scatter_object_list: {got_obj}")

# Subgroups: even ranks and odd ranks, each its own chorus group; a subgroup op vs gloo's.
evens = list(range(0, n, 2))
odds = list(range(1, n, 2))
g_even = dist.new_group(evens)
g_odd = dist.new_group(odds)
g_even_gloo = dist.new_group(evens, backend="gloo")
g_odd_gloo = dist.new_group(odds, backend="gloo")
mine, mine_gloo, members = (g_even, g_even_gloo, evens) if rank % 2 == 0 else (g_odd, g_odd_gloo, odds)
t = torch.full((6,), float(rank + 1))
u = t.clone()
dist.all_reduce(t, group=mine)
dist.all_reduce(u, group=mine_gloo)
same(t, u, "subgroup all_reduce vs gloo")
same(t, torch.full((6,), float(sum(m + 1 for m in members))), "subgroup all_reduce")
b = torch.full((2,), float(rank))
dist.broadcast(b, src=members[-1], group=mine)
same(b, torch.full((2,), float(members[-1])), "subgroup broadcast (global src rank)")
check(dist.get_backend(mine) == "chorus", f"subgroup backend {dist.get_backend(mine)}")
counts["vs_gloo"] += 1

# Async work: futures complete from chorus's callbacks; wait(timeout) and is_completed.
w = dist.all_reduce(torch.ones(1000), async_op=True)
fut = w.get_future()
chained = fut.then(lambda f: f.value()[0] * 2)
check(w.wait(), "work.wait() returned False")
check(w.is_completed(), "work not completed after wait")
same(chained.wait(), torch.full((1000,), 2.0 * n), "future.then")

# recv without src: from any rank, and dist.recv returns the sender (rank 0 receives one
# message from every other rank, in whatever order they arrive).
if rank == 0:
    senders = set()
    for _ in range(n - 1):
        got = torch.zeros(3)
        src = dist.recv(got, tag=21)
        check(torch.equal(got, torch.full((3,), float(src))), f"recv from any: {got} from {src}")
        senders.add(src)
    check(senders == set(range(1, n)), f"recv from any: senders {senders}")
else:
    dist.send(torch.full((3,), float(rank)), dst=0, tag=21)

# batch_isend_irecv: a ring exchange (send to the next rank, receive from the previous), with
# the default tag and with one, as torch's suite does for gloo only.
for tag in (0, 7):
    send_t = torch.full((4,), float(rank * 10 + tag))
    recv_t = torch.zeros(4)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send_t, (rank + 1) % n, tag=tag),
                                   dist.P2POp(dist.irecv, recv_t, (rank - 1) % n, tag=tag)])
    for req in reqs:
        req.wait()
    same(recv_t, torch.full((4,), float((rank - 1) % n * 10 + tag)), f"batch_isend_irecv {tag}")

# torch 2.x's coalescing manager: several all_reduce / all_gather_into_tensor /
# reduce_scatter_tensor calls become one op of the backend (allreduce_coalesced,
# allgather_into_tensor_coalesced, reduce_scatter_tensor_coalesced), against gloo's results.
if hasattr(dist, "_coalescing_manager"):
    def coalesced(group):
        a, b = torch.arange(3.0) + rank, torch.arange(5.0) * (rank + 1)
        with dist._coalescing_manager(group=group, async_ops=True) as cm:
            dist.all_reduce(a, group=group)
            dist.all_reduce(b, group=group)
        cm.wait()
        gathered = [torch.zeros(2 * n), torch.zeros(3 * n)]
        with dist._coalescing_manager(group=group, async_ops=True) as cm:
            dist.all_gather_into_tensor(gathered[0], torch.full((2,), float(rank)), group=group)
            dist.all_gather_into_tensor(gathered[1], torch.arange(3.0) + 10 * rank, group=group)
        cm.wait()
        scattered = [torch.zeros(2), torch.zeros(3)]
        with dist._coalescing_manager(group=group, async_ops=True) as cm:
            dist.reduce_scatter_tensor(scattered[0], torch.arange(2.0 * n) * (rank + 1),
                                       group=group)
            dist.reduce_scatter_tensor(scattered[1], torch.arange(3.0 * n) + rank, group=group)
        cm.wait()
        return [a, b] + gathered + scattered

    for i, (mine, theirs) in enumerate(zip(coalesced(None), coalesced(gloo))):
        same(mine, theirs, f"coalescing manager, tensor {i}, vs gloo")
    counts["vs_gloo"] += 1

# What chorus cannot do says so.
expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)), ["int16", "not supported"],
             "int16 dtype")
expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND),
             ["bitwise"], "BAND")
expect_error(lambda: dist.all_gather([torch.zeros(2)] * n, torch.zeros(3)),
             ["output_tensor_list"], "all_gather size mismatch")
expect_error(lambda: dist.all_to_all_single(torch.zeros(n + 1), torch.zeros(n + 1)),
             ["divisible"], "all_to_all_single uneven without splits")


# torch 2.8 and 2.9's gloo aborts the process (a failed CHECK "outputs[0].sizes() ==
# inputs[0][i].sizes()" in its scatter and reduce_scatter) where the other releases raise: there
# only chorus's refusal of a scatter or reduce_scatter list of another shape is checked.
TORCH_MINOR = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
GLOO_SHAPE_CHECK_ABORTS = TORCH_MINOR in {(2, 8), (2, 9)}


def expect_refused_like_gloo(run, words, what, gloo_raises=True):
    """run(group): chorus must refuse with `words`, and gloo must refuse the same call (chorus
    accepts what gloo accepts, and refuses at least what it refuses); gloo_raises=False where
    this torch's gloo aborts instead of raising. Every rank refuses locally before any
    communication (gather and scatter make each rank its own root)."""
    expect_error(lambda: run(None), words, what)
    if not gloo_raises:
        return
    try:
        run(gloo)
    except (RuntimeError, ValueError):
        return
    fail(f"{what}: gloo accepts it, chorus refuses it")


# Uneven all_gather: rank r contributes r + 1 rows (torch passes outputs of different sizes;
# chorus runs them as one allgatherv).
uneven_in = torch.full((rank + 1, 2), float(rank))


def all_gather_uneven(group):
    out = [torch.zeros(r + 1, 2) for r in range(n)]
    dist.all_gather(out, uneven_in, group=group)
    return out


verify(all_gather_uneven, "all_gather uneven", [torch.full((r + 1, 2), float(r)) for r in range(n)])


# Uneven reduce_scatter: block j has j + 1 rows (chorus runs it as one reduce_scatterv; gloo
# refuses it). Rank r's block j is (r + 1) * (j + 1) everywhere; the sum over ranks is
# (j + 1) * n(n + 1)/2 in every element of rank j's output.
def reduce_scatter_uneven(group):
    out = torch.zeros(rank + 1, 2)
    dist.reduce_scatter(out, [torch.full((j + 1, 2), float((rank + 1) * (j + 1)))
                              for j in range(n)], group=group)
    return out


verify(reduce_scatter_uneven, "reduce_scatter uneven",
       torch.full((rank + 1, 2), float((rank + 1) * n * (n + 1) // 2)))

# Same element count, another shape: (5, 4) outputs for a (4, 5) input are refused, not filled.
x45 = torch.arange(20, dtype=torch.float32).view(4, 5) + rank
expect_refused_like_gloo(
    lambda g: dist.all_gather([torch.zeros(5, 4) for _ in range(n)], x45, group=g),
    ["output_tensor_list[0]", "(5, 4)", "(4, 5)"], "all_gather of another shape")
expect_refused_like_gloo(
    lambda g: dist.all_gather([torch.zeros(4, 5)] * (n - 1) + [torch.zeros(20)], x45, group=g),
    ["output_tensor_list[" + str(n - 1) + "]", "(20,)"], "all_gather, one output flat")
expect_refused_like_gloo(
    lambda g: dist.gather(x45, gather_list=[torch.zeros(5, 4) for _ in range(n)],
                          dst=rank, group=g),
    ["gather_list[0]", "(5, 4)"], "gather of another shape")
expect_refused_like_gloo(
    lambda g: dist.scatter(torch.zeros(4, 5), scatter_list=[torch.zeros(5, 4) for _ in range(n)],
                           src=rank, group=g),
    ["scatter_list[0]", "(5, 4)"], "scatter of another shape",
    gloo_raises=not GLOO_SHAPE_CHECK_ABORTS)
expect_refused_like_gloo(
    lambda g: dist.reduce_scatter(torch.zeros(4, 5), [torch.zeros(5, 4) for _ in range(n)],
                                  group=g),
    ["input_list[0]", "(5, 4)"], "reduce_scatter of another shape",
    gloo_raises=not GLOO_SHAPE_CHECK_ABORTS)
# What gloo accepts (the same shape) still works; the tensor variants take any shape of the
# right element count, as torch documents (concatenated or stacked) and NCCL accepts.
got = [torch.zeros(4, 5) for _ in range(n)]
dist.all_gather(got, x45)
same(torch.stack(got), torch.stack([torch.arange(20.0).view(4, 5) + r for r in range(n)]),
     "all_gather (4, 5)")
stacked = torch.zeros(n, 4, 5)
all_gather_into_tensor(stacked, x45)
same(stacked, torch.stack([torch.arange(20.0).view(4, 5) + r for r in range(n)]),
     "all_gather_into_tensor stacked (n, 4, 5)")
if torch.cuda.is_available():
    expect_error(lambda: dist.all_reduce(torch.ones(2, device="cuda")), ["CPU"], "cuda tensor")

dist.barrier()
say(f"OK ops: {counts['vs_gloo']} checked against gloo, {counts['vs_reference_only']} against "
    f"the local reference only (gloo refuses them), {counts['errors_checked']} error messages"
    + (f"; gloo itself got {len(gloo_wrong)} wrong (e.g. {gloo_wrong[0]})" if gloo_wrong else ""))
dist.destroy_process_group()
