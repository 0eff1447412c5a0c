"""``--chunk-size`` applies to fourier and softmax only (its help): the records and table labels of the other kinds
(galerkin, linear, window, patched) do not claim a chunk they never used ("linear [chunk 128]")."""

import pytest

from opformer.bench.cases import attention_case


@pytest.mark.parametrize("kind, n, chunked", [
    ("fourier", 512, True), ("softmax", 512, True),
    ("galerkin", 512, False), ("linear", 512, False), ("window", 1024, False), ("patched", 1024, False),
])
def test_chunk_size_recorded_only_where_it_is_used(kind, n, chunked):
    case = attention_case(kind, n, chunk_size=128)
    assert case["chunk_size"] == (128 if chunked else None)


def test_table_label_of_linear_has_no_chunk(capsys):
    from opformer.bench import cli

    case = attention_case("linear", 512, chunk_size=128)
    cli._log(dict(case, status="skipped", note="x"))
    assert "chunk" not in capsys.readouterr().out
