import pytest

# The shared helpers assert too (e.g. that both stuck engines agree): pytest shows what differed
# only in the modules it rewrites, and it rewrites test modules and conftests alone by itself.
pytest.register_assert_rewrite("tests.support")
