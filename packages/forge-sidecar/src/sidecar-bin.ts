#!/usr/bin/env node
// bb-forge-sidecar: the per-bottle forge sidecar. Configuration from the
// environment (see the package README).
import { sidecarMain } from './main';

await sidecarMain();
