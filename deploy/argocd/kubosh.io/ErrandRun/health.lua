-- Argo CD health check for kubosh.io/ErrandRun (one run of a BOSH errand, bosh run-errand).
--
-- An ErrandRun runs once; kubosh writes status.phase (Pending, Running, Succeeded, Failed)
-- and the kstatus trio (Ready, Reconciling, Stalled). In order:
--   being deleted                              -> Progressing
--   status not yet of metadata.generation      -> Progressing
--   phase Succeeded (or Ready=True)            -> Healthy
--   phase Failed (or Stalled=True)             -> Degraded
--   otherwise (waiting for the deployment, running) -> Progressing
-- As an Argo CD hook (argocd.argoproj.io/hook: PostSync), the sync waits while it is
-- Progressing and fails when it is Degraded.
--
-- Uses only Lua's base and table libraries (no useOpenLibs needed).

local hs = {}
local meta = obj.metadata or {}
local status = obj.status or {}
local generation = meta.generation

local function condition(kind)
  if type(status.conditions) ~= "table" then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      if c.observedGeneration ~= nil and generation ~= nil and c.observedGeneration ~= generation then
        return nil
      end
      return c
    end
  end
  return nil
end

local function message(c, otherwise)
  if c ~= nil and type(c.message) == "string" and c.message ~= "" then
    return c.message
  end
  return otherwise
end

if meta.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Deletion in progress"
  return hs
end

if generation ~= nil and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to run the errand"
  return hs
end

local ready = condition("Ready")
local stalled = condition("Stalled")
local reconciling = condition("Reconciling")

if status.phase == "Succeeded" or (ready ~= nil and ready.status == "True") then
  hs.status = "Healthy"
  hs.message = message(ready, "Errand succeeded")
  return hs
end

if status.phase == "Failed" or (stalled ~= nil and stalled.status == "True") then
  hs.status = "Degraded"
  hs.message = message(stalled, "Errand failed")
  return hs
end

hs.status = "Progressing"
hs.message = message(reconciling, "Waiting for the controller to run the errand")
return hs
