"""Figures a reader can read: legends that hide no curve and name each line once, lines drawn
where the prose puts them, categories that are not encodings kept out of the encodings' colours."""

import matplotlib.pyplot as plt
import pandas as pd

import lengen_helpers as L


def test_scratchpad_lengths_marks_the_longest_training_size_where_the_other_figures_do():
    curves = pd.DataFrame(
        [
            {"encoding": "nope", "seed": 0, "scratchpad": pad, "n": n, "exact_match": 1.0 if n <= 8 else 0.0}
            for pad in ("o", "none")
            for n in range(1, 17)
        ]
    )
    fig = L.plot_scratchpad_lengths(curves, 0.1)
    (ax,) = fig.axes
    line = next(x for x in ax.get_lines() if x.get_label().startswith("longest training size"))
    assert list(line.get_xdata()) == [8, 8]  # at the size itself, as figures 07 and 11 draw it
    assert line.get_label() == "longest training size (8 digits)"
    plt.close(fig)

