#!/usr/bin/env node
// bb-supervise-mcp: the supervise tools as an MCP server on stdio, talking to the
// bottle's supervise sidecar at $BB_SUPERVISE_SOCKET (default /run/bb/supervise.sock).
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { SuperviseClient } from './client';
import { createSuperviseMcpServer } from './mcp';

const server = createSuperviseMcpServer(new SuperviseClient());
await server.connect(new StdioServerTransport());
