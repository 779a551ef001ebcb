"""``prose lsp``: a Language Server Protocol server for ``.prose`` files, over stdio.

Everything it tells an editor comes from the front end (:func:`openprose.language.compile`)
and the one analysis of a program (:mod:`openprose.language.analysis`): diagnostics, the
symbols written in the source, statements with their lines. It needs the ``lsp`` extra
(pygls, lsprotocol), which ``prose compile`` never imports.
"""
