from core import plotting


def test_plain_escapes_what_plotly_would_render_as_markup():
    assert (
        plotting.plain('<a href="x">team</a> & co') == '&lt;a href="x"&gt;team&lt;/a&gt; &amp; co'
    )


def test_trace_names_and_bar_categories_are_literal_text():
    bars = plotting.bar("<b>bold</b>", ["<i>team</i>", "plain"], [1, 2])
    lines = plotting.line("<span>s</span>", [1, 2], [3, 4])
    horizontal = plotting.bar("h", [1.0], ["<sub>x</sub>"], orientation="h")

    assert bars["name"] == "&lt;b&gt;bold&lt;/b&gt;"
    assert bars["x"] == ["&lt;i&gt;team&lt;/i&gt;", "plain"]
    assert "<b>" not in bars["hovertemplate"]
    assert lines["name"] == "&lt;span&gt;s&lt;/span&gt;" and lines["x"] == [1, 2]
    assert horizontal["y"] == ["&lt;sub&gt;x&lt;/sub&gt;"] and horizontal["x"] == [1.0]
