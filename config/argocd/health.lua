-- Argo CD health check for proctor.dev/Evaluation, Proctor's evaluation runs.
--
-- Installed as the key resource.customizations.health.proctor.dev_Evaluation
-- of Argo CD's argocd-cm ConfigMap (config/argocd/argocd-cm.yaml holds this
-- script verbatim); tested by config/argocd/health_test.go against the cases
-- of config/argocd/health_test.yaml, in gopher-lua as Argo CD runs it.
--
-- The status follows kstatus: status.observedGeneration (-1 on a new
-- Evaluation, until the controller saw it) and the conditions Ready (True only
-- when the run succeeded and met its gate), Reconciling and Stalled (True when
-- the run cannot go on without a change). It needs a controller that sets
-- them; see api/v1alpha1/conditions.go and controllers/state.go.
--
-- Mapping, first match wins:
--   no status, or status.observedGeneration missing or not
--   metadata.generation           -> Progressing "Waiting for the controller to observe generation N"
--   condition Ready True          -> Healthy     "<Ready's message> (score <status.score>)"
--   condition Stalled True        -> Degraded    "<Stalled's reason>: <Stalled's message>"
--   phase Failed                  -> Degraded    "<status.reason>: <status.message>"
--   spec.suspend true, or phase
--   Suspended (run not ended)     -> Suspended   "Suspended: <progress> samples; <status.message>"
--   otherwise                     -> Progressing "<phase>: <progress> samples; <status.reason>: <status.message>"
--     (each part when set; with none, Reconciling's message: "Pending: planning shards")
--
-- As a PostSync (or any) hook, Argo CD ends the hook when it is Healthy
-- (succeeded) or Degraded (failed) and waits while it is Progressing or
-- Suspended.
--
-- Argo CD runs custom checks without Lua's standard libraries (unless
-- resource.customizations.useOpenLibs.proctor.dev_Evaluation is true): this
-- script uses base functions only (type, tostring, ipairs), no string.*,
-- math.* or os.*. Any field may be missing; numbers are Lua numbers.

local function str(v)
  if type(v) == "string" then
    return v
  end
  if type(v) == "number" then
    return tostring(v)
  end
  return ""
end

-- join returns a and b separated by sep, or whichever is not empty.
local function join(a, sep, b)
  if a == "" then
    return b
  end
  if b == "" then
    return a
  end
  return a .. sep .. b
end

local function condition(status, ctype)
  if type(status.conditions) ~= "table" then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if type(c) == "table" and c.type == ctype then
      return c
    end
  end
  return nil
end

local function isTrue(c)
  return c ~= nil and c.status == "True"
end

local hs = {}
local metadata = obj.metadata
if type(metadata) ~= "table" then
  metadata = {}
end
local spec = obj.spec
if type(spec) ~= "table" then
  spec = {}
end
local status = obj.status
local generation = metadata.generation

if type(status) ~= "table" or type(status.observedGeneration) ~= "number"
    or type(generation) ~= "number" or status.observedGeneration ~= generation then
  hs.status = "Progressing"
  if type(generation) == "number" then
    hs.message = "Waiting for the controller to observe generation " .. tostring(generation)
  else
    hs.message = "Waiting for the controller to observe the Evaluation"
  end
  return hs
end

local phase = str(status.phase)
local reasonMessage = join(str(status.reason), ": ", str(status.message))

local ready = condition(status, "Ready")
if isTrue(ready) then
  hs.status = "Healthy"
  hs.message = str(ready.message)
  if hs.message == "" then
    hs.message = "the run succeeded"
  end
  local score = str(status.score)
  if score ~= "" then
    hs.message = hs.message .. " (score " .. score .. ")"
  end
  return hs
end

local stalled = condition(status, "Stalled")
if isTrue(stalled) then
  hs.status = "Degraded"
  local message = str(stalled.message)
  if message == "" then
    message = str(status.message)
  end
  hs.message = join(str(stalled.reason), ": ", message)
  if hs.message == "" then
    hs.message = "the run cannot go on"
  end
  return hs
end

if phase == "Failed" then
  hs.status = "Degraded"
  hs.message = reasonMessage
  if hs.message == "" then
    hs.message = "the run failed"
  end
  return hs
end

-- The run goes on, or waits: say how far it is, and why it waits.
local head = phase
if head == "" then
  head = "Pending"
end
if spec.suspend == true or phase == "Suspended" then
  hs.status = "Suspended"
  head = "Suspended"
else
  hs.status = "Progressing"
end
local done = ""
if type(status.progress) == "table" and str(status.progress.text) ~= "" then
  done = str(status.progress.text) .. " samples"
end
local why = reasonMessage
if done == "" and why == "" then
  local reconciling = condition(status, "Reconciling")
  if isTrue(reconciling) then
    why = str(reconciling.message)
  end
end
hs.message = join(head, ": ", join(done, "; ", why))
return hs
