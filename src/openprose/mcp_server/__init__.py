"""The MCP server: hosts drive and read runs through tools, resources and prompts."""
