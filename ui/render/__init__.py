"""Pure renderers: a Trace (or sweep points, or a lesson's runs) in, HTML, text, tables and figures out.

They import no Gradio and no tab; every tab draws with them, and tests call them without a server.
"""
