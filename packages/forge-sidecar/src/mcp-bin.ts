#!/usr/bin/env node
// bb-forge-mcp: the forge tools as an MCP server on stdio, talking to the sidecar
// at $BB_SIDECAR_SOCKET (default /run/bb/forge.sock).
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { ForgeSidecarClient } from './client';
import { createForgeMcpServer } from './mcp-bridge';

const server = createForgeMcpServer(new ForgeSidecarClient());
await server.connect(new StdioServerTransport());
