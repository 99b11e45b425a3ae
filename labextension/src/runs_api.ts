/**
 * The runs panel's client of the server extension's API (`jupyter_torchdist/panel/server.py`).
 *
 * Requests go with the Jupyter server's own credentials, as `@jupyterlab/services`' `ServerConnection` sends
 * them (the token header, the `_xsrf` cookie as `X-XSRFToken`), taken from the application's server settings,
 * so the plugin needs no token object from `@jupyterlab/services`. The list is polled with `If-None-Match`: an
 * unchanged list is a bodiless 304.
 */

/** One run or sweep, as `jupyter_torchdist/panel/registry.py`'s `RunEntry` says. */
export interface IRunEntry {
  kind: 'run' | 'sweep';
  id: string;
  number: number;
  kernel_id: string;
  kernel?: string; // live, ended, gone
  notebook: string | null;
  cell_id: string | null;
  cell: string;
  background: boolean;
  /** A detached run's (`--detach`): its runner holds it, no kernel does; "Attach" adds `%distribute_attach ID`. */
  detached?: boolean;
  sweep: string | null;
  params: string | null;
  backend: string | null;
  where: string | null;
  ranks: number;
  hosts: string[];
  host_count: number;
  state: string;
  status: string | null;
  step: number | null;
  total: number | null;
  rate: number | null;
  metric: { name: string; value: unknown } | null;
  submitted: number;
  started: number | null;
  ended: number | null;
  outcome: string | null;
  links: { kind: string; label: string; url?: string; path?: string }[];
  report: string | null;
  members?: string[];
  counts?: Record<string, number>;
}

/** A run's report as the API gives it: the MIME type the report renderer takes, and its data. */
export interface IRunReport {
  mime: string;
  data: unknown;
  at: number;
  state: string;
}

/** The parts of `ServerConnection.ISettings` used here. */
export interface IServerSettingsLike {
  baseUrl: string;
  token?: string;
  init?: RequestInit;
}

export const ENDED = ['done', 'failed', 'stopped', 'stopped_early', 'lost'];

export function isGoing(entry: IRunEntry): boolean {
  return !ENDED.includes(entry.state);
}

function xsrf(): string | null {
  const match = document.cookie.match('\\b_xsrf=([^;]*)\\b');
  return match ? decodeURIComponent(match[1]) : null;
}

/** Why a request failed, as the API said it (its JSON `message`), else the HTTP status. */
export async function reason(response: Response): Promise<string> {
  try {
    const body = await response.json();
    if (body && typeof body.message === 'string') {
      return body.message;
    }
  } catch {
    // not JSON
  }
  return `${response.status} ${response.statusText}`;
}

export class RunsClient {
  constructor(private readonly settings: IServerSettingsLike) {}

  /** The list; null when it has not changed since the last call that returned one. */
  async list(all = false): Promise<IRunEntry[] | null> {
    const headers: Record<string, string> = this._etag ? { 'If-None-Match': this._etag } : {};
    const response = await this.request(`runs${all ? '?all=1' : ''}`, { headers, cache: 'no-store' });
    if (response.status === 304) {
      return null;
    }
    if (!response.ok) {
      throw new Error(await reason(response));
    }
    this._etag = response.headers.get('ETag');
    return (await response.json()) as IRunEntry[];
  }

  /** Ask the run's kernel to stop it; true once the kernel took the request. */
  async stop(id: string): Promise<boolean> {
    const response = await this.request(`runs/${encodeURIComponent(id)}/stop`, { method: 'POST' });
    if (!response.ok) {
      throw new Error(await reason(response));
    }
    return response.status === 200;
  }

  /** Ask a running run's kernel to write its report now (a GET only reads what is written); true once written. */
  async freshReport(id: string): Promise<boolean> {
    const response = await this.request(`runs/${encodeURIComponent(id)}/report`, { method: 'POST' });
    return response.status === 200;
  }

  /** The run's report; null when unchanged since `etag`. */
  async report(id: string, etag: string | null): Promise<{ report: IRunReport; etag: string | null } | null> {
    const headers: Record<string, string> = etag ? { 'If-None-Match': etag } : {};
    const response = await this.request(`runs/${encodeURIComponent(id)}/report`, { headers, cache: 'no-store' });
    if (response.status === 304) {
      return null;
    }
    if (!response.ok) {
      throw new Error(await reason(response));
    }
    return { report: (await response.json()) as IRunReport, etag: response.headers.get('ETag') };
  }

  /** A request to `jupyter-torchdist/api/<path>` with the server's credentials. */
  request(path: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.settings.token) {
      headers.set('Authorization', `token ${this.settings.token}`);
    }
    const cookie = xsrf();
    if (cookie) {
      headers.set('X-XSRFToken', cookie);
    }
    const base = this.settings.baseUrl.endsWith('/') ? this.settings.baseUrl : `${this.settings.baseUrl}/`;
    return fetch(`${base}jupyter-torchdist/api/${path}`, {
      credentials: 'same-origin',
      ...this.settings.init,
      ...init,
      headers
    });
  }

  private _etag: string | null = null;
}
