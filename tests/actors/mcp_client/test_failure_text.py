"""What a server's stderr adds to its failure notice: its own last lines, not npm's boilerplate."""

from __future__ import annotations

from actors.mcp_client.server import last_lines

NPX_404 = """npm notice
npm notice New minor version of npm available! 11.19.1 -> 11.21.3
npm notice To update run: npm install -g npm@11.21.3
npm error code E404
npm error 404 Not Found - GET https://registry.npmjs.org/@modelcontextprotocol%2fdoes-not-exist-xyz - Not found
npm error A complete log of this run can be found in: /state/homes/s-1/servers/.npm/_logs/2026-12-05T07_40_00_000Z-debug-0.log
"""


def test_npm_notices_and_the_log_path_are_left_out_its_error_is_kept():
    text = last_lines(NPX_404)
    assert text == ("npm error code E404\nnpm error 404 Not Found - GET "
                    "https://registry.npmjs.org/@modelcontextprotocol%2fdoes-not-exist-xyz - Not found")


def test_a_servers_own_lines_are_kept_last_first_bounded():
    assert last_lines("one\n\ntwo\nthree\n", lines=2) == "two\nthree"
    assert last_lines("x" * 50, chars=10) == "…" + "x" * 10
