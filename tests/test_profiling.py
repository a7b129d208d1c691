"""ttr_edu.profiling: the memory counters count exactly the storages a computation creates."""

import pytest
import torch

from ttr_edu import profiling

MIB = 2**20


def test_peak_memory_counts_tensors_alive_together():
    def two_at_once():
        a = torch.empty(MIB, dtype=torch.uint8)
        b = torch.empty(2 * MIB, dtype=torch.uint8)
        return a, b

    assert profiling.peak_memory(two_at_once) == 3 * MIB


def test_peak_memory_forgets_freed_temporaries():
    def one_after_another():
        for _ in range(3):
            torch.empty(MIB, dtype=torch.uint8)  # dropped at once

    assert profiling.peak_memory(one_after_another) == MIB


def test_views_inputs_and_in_place_results_are_not_allocations():
    x = torch.zeros(1024, 256)  # 1 MiB, created before the call

    def views_and_in_place():
        x.t()[:10], x.reshape(-1)  # views of the input
        x.add_(1.0)  # in place: returns x
        torch.add(x, 1.0, out=x)

    assert profiling.peak_memory(views_and_in_place) == 0
    assert profiling.bytes_created(views_and_in_place) == 0
    # ...but a copy is one
    assert profiling.bytes_created(lambda: x.t().contiguous()) == MIB


def test_bytes_created_sums_every_tensor_even_when_freed():
    def one_after_another():
        for _ in range(3):
            torch.empty(MIB, dtype=torch.uint8)

    assert profiling.bytes_created(one_after_another) == 3 * MIB


def test_quadratic_parallel_form_shows_in_the_peak():
    """The T x T score matrix of a parallel form: the peak grows ~4x when T doubles."""

    def scores(T):
        q = torch.randn(T, 8)
        return lambda: (q @ q.T).tril() @ q

    ratio = profiling.peak_memory(scores(512)) / profiling.peak_memory(scores(256))
    assert 3.5 < ratio <= 4.0


def test_best_seconds_is_the_minimum_of_the_runs():
    calls = []
    assert profiling.best_seconds(lambda: calls.append(1), repeats=3) >= 0.0
    assert len(calls) == 3


@pytest.mark.parametrize(
    "measure",
    [profiling.peak_memory, profiling.bytes_created, profiling.operation_count, profiling.best_seconds],
)
def test_a_non_callable_is_refused(measure):
    with pytest.raises(TypeError, match="fn: expected a callable"):
        measure(torch.zeros(3))


@pytest.mark.parametrize("repeats, error", [(0, ValueError), (1.5, TypeError)])
def test_best_seconds_checks_repeats(repeats, error):
    with pytest.raises(error, match="repeats"):
        profiling.best_seconds(lambda: None, repeats=repeats)


def test_operation_count_counts_each_pytorch_operation_once():
    a, b = torch.randn(3, 5), torch.randn(5, 7)
    assert profiling.operation_count(lambda: (a @ b).relu()) == 2  # mm, relu
    assert profiling.operation_count(lambda: None) == 0

    def steps(n):
        x = torch.zeros(4)
        for _ in range(n):
            x = x + 1.0
        return x

    # a loop of small steps pays one operation per step (and one to make x), whatever the size of each
    assert [profiling.operation_count(lambda n=n: steps(n)) for n in (1, 8, 64)] == [2, 9, 65]


def test_matmul_flops_counts_two_per_multiply_add():
    a, b = torch.randn(3, 5), torch.randn(5, 7)
    assert profiling.matmul_flops(lambda: a @ b) == 2 * 3 * 5 * 7
    assert profiling.matmul_flops(lambda: a * 2) == 0  # elementwise work is not a matrix product


def test_matmul_flops_refuses_a_non_callable():
    with pytest.raises(TypeError, match="fn"):
        profiling.matmul_flops(3)


def test_work_count_counts_elements_read_and_written_and_the_multiply_adds_of_products():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    assert profiling.work_count(lambda: a @ b) == 12 + 20 + 15 + 3 * 4 * 5  # reads, writes, multiply-adds
    assert profiling.work_count(lambda: a.relu()) == 12 + 12
    assert profiling.work_count(lambda: a.sum(0)) == 12 + 4  # a reduction reads everything
    assert profiling.work_count(lambda: (a.T, a[1:], a.view(12))) == 0  # views touch nothing
    assert profiling.work_count(lambda: None) == 0


def test_work_count_counts_an_in_place_write_once_and_an_indexed_one_by_what_it_touches():
    big, row = torch.zeros(1000, 4), torch.ones(4)
    assert profiling.work_count(lambda: big[3].copy_(row)) == 4 + 4  # the slice written, the row read
    rows = torch.tensor([1, 2])
    assert profiling.work_count(lambda: big.index_select(0, rows)) == 2 + 8  # indices read, rows written: not 4000
    index = torch.tensor([5])
    assert profiling.work_count(lambda: big.index_put_((index,), row)) == 1 + 4  # not big's 4000


def test_work_count_grows_like_the_cost_whatever_the_spelling():
    def prefix_sums(x):  # linear: one running sum
        return torch.cumsum(x, 0)

    def prefix_sums_again(x):  # quadratic: every prefix summed from scratch
        return torch.stack([x[: t + 1].sum(0) for t in range(len(x))])

    x, y = torch.randn(64, 8), torch.randn(256, 8)
    assert profiling.work_count(lambda: prefix_sums(y)) == 4 * profiling.work_count(lambda: prefix_sums(x))
    ratio = profiling.work_count(lambda: prefix_sums_again(y)) / profiling.work_count(lambda: prefix_sums_again(x))
    assert ratio > 12
