/**
 * A request to the jupyter-torchdist code in a busy kernel, over the kernel's control channel.
 *
 * While a `%%distribute` cell runs, the kernel's shell channel waits for the cell, but its control channel is
 * read by a thread of its own (ipykernel 6+). The extension registers a handler for the message type below
 * there (`jupyter_torchdist/kernel/runs/view_requests.py`); the message is built here by hand, with the fields of the
 * Jupyter messaging protocol, so that the plugin needs nothing beyond the kernel connection it already finds.
 */

/** The message type the kernel-side handler answers. */
export const REQUEST_TYPE = 'jupyter_torchdist_request';

/** The parts of `@jupyterlab/services`' kernel connection a control request uses. */
export interface IControlKernel {
  clientId?: string;
  username?: string;
  sendControlMessage?(msg: unknown, expectReply?: boolean, disposeOnDone?: boolean): { done: Promise<unknown> };
}

function messageId(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (c?.randomUUID) {
    return c.randomUUID();
  }
  return `${Date.now().toString(16)}-${Math.random().toString(16).slice(2)}`;
}

/** Send `content` as a request to the extension in `kernel`; false when this kernel connection cannot. */
export function sendRequest(kernel: IControlKernel, content: Record<string, unknown>): boolean {
  if (typeof kernel.sendControlMessage !== 'function') {
    return false;
  }
  const msg = {
    channel: 'control',
    header: {
      msg_id: messageId(),
      msg_type: REQUEST_TYPE,
      username: kernel.username ?? '',
      session: kernel.clientId ?? '',
      date: new Date().toISOString(),
      version: '5.3'
    },
    parent_header: {},
    metadata: {},
    content,
    buffers: []
  };
  try {
    kernel.sendControlMessage(msg, true, true).done.catch(reason => {
      console.error('jupyter-torchdist: the kernel did not take the request', reason);
    });
    return true;
  } catch (reason) {
    console.error('jupyter-torchdist: could not send the request', reason);
    return false;
  }
}
