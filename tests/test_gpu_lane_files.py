"""``bench/gpu_check.py`` collects only the test modules that mark a test ``gpu``: none is left out."""

from __future__ import annotations

import pytest

from .conftest import GPU_TEST_FILES, REPO, load_script


def _gpu_check():
    return load_script(REPO / "bench" / "gpu_check.py")


def test_the_lane_collects_every_module_with_a_gpu_test(request, tmp_path):
    lane = {p.resolve() for p in map(REPO.joinpath, _gpu_check().lane_files())}
    marked = {p.resolve() for p in request.config.stash[GPU_TEST_FILES]}
    if not marked:
        pytest.skip("no test marked gpu was collected in this run (run it with the suite: pytest tests)")
    assert marked <= lane, sorted(marked - lane)
    assert REPO / "tests" / "test_gpu.py" in lane
    # the search itself: a module with a gpu-marked test is found, one without is not
    (tmp_path / "test_a.py").write_text("import pytest\n\n\n@pytest.mark.gpu\ndef test_x():\n    pass\n")
    (tmp_path / "test_b.py").write_text("def test_y():\n    pass\n")
    assert _gpu_check().lane_files(tmp_path) == [str(tmp_path / "test_a.py")]
