// What the page knows: the open conversation, its turns, the lists on screen.

export const PAGE = 25;
export const FOLD_LINES = 14;
export const FOLD_CHARS = 1500;
export const POLL_MS = 4000;

export const state = {
  key: sessionStorage.getItem("toolbridge-api-key") || "",
  current: null,        // the open conversation's id
  offset: 0,
  conversations: [],    // the page of the list on screen
  approvals: [],        // pending approvals
  turns: new Map(),     // message id -> turn of the open conversation
  openTurn: null,       // a turn whose message id is not known yet (run started, or own send)
  lastEventId: null,
  hubRunning: false,
  polling: null,
  pollSignature: "",
  tools: [],
  toolsSignature: "",
  heard: new Map(),     // conversation id -> how many of its events this page has handled
  openedAt: 0,          // when a conversation was last read from the journal (Date.now())
};
export const $ = (id) => document.getElementById(id);
export const timers = {};
